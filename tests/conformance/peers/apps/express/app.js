// The peers' Express app: POST /charges/ records each run of the route in PostgreSQL.
// express-idempotency wired as its README says: the middleware on the POST routes, and the
// route returning early when the middleware has answered (isHit). The first middleware
// records every POST /charges/ and its answer, whoever answered it.
'use strict';
const express = require('express');
const { Pool } = require('pg');
const { idempotency, getSharedIdempotencyService } = require('express-idempotency');

const pool = new Pool({ connectionString: process.env.PEER_DSN, max: 8 });
const app = express();

app.use('/charges/', (req, res, next) => {
  if (req.method !== 'POST') return next();
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
});
app.use(express.json());
app.post('*', idempotency());

app.post('/charges/', async (req, res) => {
  if (getSharedIdempotencyService().isHit(req)) return;
  const amount = req.body && !Array.isArray(req.body) ? req.body.amount : undefined;
  const row = [req.get('idempotency-key') ?? null, req.get('authorization') ?? '', Date.now() / 1000];
  if (!Number.isInteger(amount)) {
    await pool.query('INSERT INTO charges (key, caller, at, status) VALUES ($1, $2, $3, 400)', row);
    return res.status(400).json({ error: 'send an amount' });
  }
  const { rows } = await pool.query(
    'INSERT INTO charges (key, caller, at, status, amount) VALUES ($1, $2, $3, 201, $4) RETURNING id',
    [...row, amount]);
  res.status(201).json({ id: Number(rows[0].id), amount });
});

app.get('/count/', async (req, res) => {
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM charges WHERE status = 201');
  res.json({ count: rows[0].n });
});

function answerId(body) {
  try {
    const id = JSON.parse(body).id;
    return Number.isInteger(id) ? id : null;
  } catch (e) {
    return null;
  }
}

app.listen(Number(process.env.PORT), '127.0.0.1');
