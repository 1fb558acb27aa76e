"""What the faces share: the Django view decorator behind ``idempotency_django.idempotent``,
``idempotency_of``, the GraphQL fields, DRF's deferred throttling, the task options, the
OpenAPI documentation and the optional extras' messages.

Internal: the public names live on the faces (docs/api.rst).
"""
