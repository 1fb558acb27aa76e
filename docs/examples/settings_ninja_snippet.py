# With idempotency-django[ninja], for the Ninja API: added after settings_snippet.py.

INSTALLED_APPS += ["ninja"]  # also serves Ninja's /docs page from static files, not a CDN
PAYMENTS_API_KEYS = {"key-alice", "key-bob"}  # in real life: a table of hashed keys
