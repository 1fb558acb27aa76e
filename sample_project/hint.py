"""Printed by `make run` before the server starts: how to see a replay."""

print(
    """
Serving the sample project on http://127.0.0.1:8000/ (admin: demo / demo).
Take a payment twice with one key; the second answer carries Idempotent-Replayed: true:

  curl -i -X POST http://127.0.0.1:8000/charges/ -H 'Idempotency-Key: demo-1' \\
       -H 'Content-Type: application/json' -d '{"amount": 1000, "currency": "eur"}'

The same through the DRF API, as the demo user (its token is printed above):

  curl -i -X POST http://127.0.0.1:8000/api/charges/ -H 'Authorization: Token <token>' \\
       -H 'Idempotency-Key: demo-2' -H 'Content-Type: application/json' -d '{"amount": 500}'

The counters move with each answer (executed, then replayed):

  curl -s http://127.0.0.1:8000/metrics | grep '^idempotency_requests_total'

API schema: http://127.0.0.1:8000/api/schema/   Swagger UI: http://127.0.0.1:8000/api/docs/
"""
)
