import os

PEER = os.environ["PEER"]
SECRET_KEY = "peers-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "peerproject.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "rest_framework",
    "rest_framework.authtoken",
    "charges",
]
# charges.views.wire first: it sees every request and answer, whoever answers.
MIDDLEWARE = ["charges.views.wire", "django.middleware.common.CommonMiddleware"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["PEER_DB"],
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
    }
}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}
# Each package as its README (and, where the README is silent, its code) sets it up;
# docs/verify.rst says where a choice was made.
if PEER == "django-idempotency-key":
    MIDDLEWARE.append("idempotency_key.middleware.IdempotencyKeyMiddleware")
elif PEER == "djangorestframework-idempotency-key":
    INSTALLED_APPS.append("rest_framework_idempotency_key")
    MIDDLEWARE.append("rest_framework_idempotency_key.middleware.IdempotencyKeyMiddleware")
    # Read by the middleware on every reuse of a key (no default: AttributeError without it);
    # the README names no value: 60 s, far longer than any request here.
    IDEMPOTENCY_KEY_LOCK_TIMEOUT = 60
elif PEER == "drf-idempotency":
    INSTALLED_APPS.append("drf_idempotency")
    MIDDLEWARE.append("drf_idempotency.middleware.IdempotencyMiddleware")
    IDEMPOTENCY = {"BACKEND": "drf_idempotency.backends.database.DatabaseBackend"}
elif PEER == "drf-idempotencykey":
    INSTALLED_APPS.append("drf_idempotencykey")  # and its mixin on the view
elif PEER == "drf-idem":
    INSTALLED_APPS.append("drf_idem")
    MIDDLEWARE.insert(1, "drf_idem.middleware.IdempotencyMiddleware")  # first but for wire
    CACHES["drf_idem"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ["PEER_REDIS"],
    }
    DRF_IDEM = {
        "HEADER": "HTTP_X_REQUEST_ID",
        "TTL": 60,
        "CACHE_BACKEND": "drf_idem",
        "ENDPOINTS": [],
        "METHODS": ["POST", "PUT", "PATCH", "DELETE"],
    }
