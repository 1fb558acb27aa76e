// The peers' NestJS app: POST /charges/ records each run of the handler in PostgreSQL.
// @node-idempotency/nestjs wired as its README says: NodeIdempotencyModule.forRootAsync with
// its memory storage (one process), @Idempotent() on the handler. Plain JavaScript, so the
// decorators are applied by hand (Reflect.decorate), as TypeScript would compile them. An
// Express middleware in front records every POST /charges/ and its answer, whoever answered it.
'use strict';
require('reflect-metadata');
const common = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { NodeIdempotencyModule, Idempotent, StorageAdapterEnum } = require('@node-idempotency/nestjs');
const { Pool } = require('pg');

const pool = new Pool({ connectionString: process.env.PEER_DSN, max: 8 });

class ChargesController {
  async create(body, headers) {
    const amount = body && !Array.isArray(body) ? body.amount : undefined;
    const row = [headers['idempotency-key'] ?? null, headers.authorization ?? '', Date.now() / 1000];
    if (!Number.isInteger(amount)) {
      await pool.query('INSERT INTO charges (key, caller, at, status) VALUES ($1, $2, $3, 400)', row);
      throw new common.BadRequestException({ error: 'send an amount' });
    }
    const { rows } = await pool.query(
      'INSERT INTO charges (key, caller, at, status, amount) VALUES ($1, $2, $3, 201, $4) RETURNING id',
      [...row, amount]);
    return { id: Number(rows[0].id), amount };
  }

  async count() {
    const { rows } = await pool.query('SELECT count(*)::int AS n FROM charges WHERE status = 201');
    return { count: rows[0].n };
  }
}
const proto = ChargesController.prototype;
common.Body()(proto, 'create', 0);
common.Headers()(proto, 'create', 1);
Reflect.decorate([common.Post('charges'), common.HttpCode(201), Idempotent()], proto, 'create',
  Object.getOwnPropertyDescriptor(proto, 'create'));
Reflect.decorate([common.Get('count')], proto, 'count', Object.getOwnPropertyDescriptor(proto, 'count'));
Reflect.decorate([common.Controller()], ChargesController);

class AppModule {}
Reflect.decorate([common.Module({
  imports: [NodeIdempotencyModule.forRootAsync({ storage: { adapter: StorageAdapterEnum.memory } })],
  controllers: [ChargesController],
})], AppModule);

function wire(req, res, next) {
  if (req.method !== 'POST' || !req.path.startsWith('/charges')) return next();
  const arrived = Date.now() / 1000;
  const end = res.end.bind(res);
  let body = '';
  res.end = (chunk, ...rest) => {
    if (chunk) body += chunk.toString();
    return end(chunk, ...rest);
  };
  res.on('finish', () => {
    pool.query('INSERT INTO calls (key, caller, status, answer_id, at) VALUES ($1, $2, $3, $4, $5)',
      [req.get('idempotency-key') ?? null, req.get('authorization') ?? '', res.statusCode,
        answerId(body), arrived]);
  });
  next();
}

function answerId(body) {
  try {
    const id = JSON.parse(body).id;
    return Number.isInteger(id) ? id : null;
  } catch (e) {
    return null;
  }
}

(async () => {
  const app = await NestFactory.create(AppModule, { logger: ['error'] });
  app.use(wire);
  await app.listen(Number(process.env.PORT), '127.0.0.1');
})();
