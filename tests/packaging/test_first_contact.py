"""A new user's first contact: the built wheel in a fresh virtualenv and a new project.

With only the wheel and its own dependencies (Django, cryptography) installed, ``startproject`` + ``startapp payments``,
the quick start's files pasted as they are (``docs/examples/``), ``migrate`` on
SQLite and ``runserver``: the function view and the class-based view answer as the
docs say, curl-like (no CSRF token). Then with ``[drf]``, the viewset; then every
other extra imports.
"""

from __future__ import annotations

import base64
import json
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.packaging.conftest import (
    ROOT,
    Answer,
    Dist,
    Project,
    Runserver,
    Venv,
    clean_env,
    run,
    serve,
)

pytestmark = pytest.mark.packaging

PROBLEM = "application/problem+json"
ALICE = "Basic " + base64.b64encode(b"alice:s3cret-pw").decode()


@pytest.fixture(scope="module")
def django_only(workdir: Path, dist: Dist) -> Venv:
    venv = Venv(workdir / "venv")
    venv.pip_install(str(dist.wheel))
    return venv


@pytest.fixture(scope="module")
def site(django_only: Venv, workdir: Path) -> Iterator[Runserver]:
    project = Project(django_only, workdir / "site", drf=False)
    yield from serve(project, workdir / "site.log")


@pytest.fixture(scope="module")
def with_drf(workdir: Path, dist: Dist) -> Venv:
    venv = Venv(workdir / "venv-drf")
    venv.pip_install(f"{dist.wheel}[drf]")
    return venv


@pytest.fixture(scope="module")
def drf_site(with_drf: Venv, workdir: Path) -> Iterator[Runserver]:
    project = Project(with_drf, workdir / "site-drf", drf=True)
    project.manage(
        *("createsuperuser", "--noinput", "--username", "alice", "--email", "a@example.com"),
        DJANGO_SUPERUSER_PASSWORD="s3cret-pw",
    )
    yield from serve(project, workdir / "site-drf.log")


@pytest.fixture(scope="module")
def ninja_site(workdir: Path, dist: Dist) -> Iterator[Runserver]:
    venv = Venv(workdir / "venv-ninja")
    venv.pip_install(f"{dist.wheel}[ninja]")
    project = Project(venv, workdir / "site-ninja", drf=False, ninja=True)
    yield from serve(project, workdir / "site-ninja.log")


def post(server: Runserver, path: str, data: object, key: str | None, **headers: str) -> Answer:
    if key is not None:
        headers["Idempotency-Key"] = key
    body = json.dumps(data).encode()
    return server.request("POST", path, body, **{"Content-Type": "application/json", **headers})


def assert_replayed(first: Answer, retry: Answer) -> None:
    assert retry.status == first.status
    assert retry.body == first.body
    for name in ("Content-Type", "Location"):
        assert retry.header(name) == first.header(name)
    assert first.header("Idempotent-Replayed") is None
    assert retry.header("Idempotent-Replayed") == "true"


def assert_protected(server: Runserver, path: str, data: dict[str, int], **headers: str) -> Answer:
    """The quick start's promise on one endpoint; the first answer."""
    key = f"first-contact-{path}"
    first = post(server, path, data, key, **headers)
    assert first.status == 201, first.body
    assert_replayed(first, post(server, path, data, key, **headers))
    other = post(server, path, {**data, "amount": data["amount"] - 1}, key, **headers)
    assert (other.status, other.header("Content-Type")) == (422, PROBLEM)
    missing = post(server, path, data, None, **headers)
    assert (missing.status, missing.header("Content-Type")) == (400, PROBLEM)
    return first


# cryptography seals stored answers at rest (a core dependency since 0.4); cffi and
# pycparser are its own requirements on CPython.
CORE = {"idempotency-django", "django", "asgiref", "sqlparse", "cryptography", "cffi", "pycparser"}


def test_only_django_cryptography_and_the_wheel_are_installed(django_only: Venv) -> None:
    installed = django_only.distributions() - {"pip", "setuptools", "wheel"}
    assert installed == CORE


def test_version_and_metadata_come_from_the_wheel(django_only: Venv) -> None:
    code = (
        "import idempotency_django, importlib.metadata as m; "
        "meta = m.metadata('idempotency-django'); "
        "print(idempotency_django.__version__, meta['License-Expression'], "
        "*sorted(u.split(',')[0] for u in meta.get_all('Project-URL')))"
    )
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert django_only.python(code).split() == [
        version,
        "MIT",
        "Changelog",
        "Documentation",
        "Homepage",
    ]


@pytest.mark.parametrize(("module", "extra"), [("rest_framework", "drf"), ("tasks", "celery")])
def test_an_integration_without_its_extra_says_what_to_install(
    django_only: Venv, module: str, extra: str
) -> None:
    code = (
        "import django; from django.conf import settings; "
        "settings.configure(INSTALLED_APPS=['idempotency_django']); django.setup()\n"
        "try:\n"
        f"    import idempotency_django.{module}\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error)\n"
    )
    assert django_only.python(code).strip().endswith(f"pip install 'idempotency-django[{extra}]'")


def test_the_conformance_command_starts_without_settings_and_names_its_extra(
    django_only: Venv,
) -> None:
    command = django_only.bin("idempotency-conformance")
    assert run([command, "--help"]).startswith("usage: idempotency-conformance ")
    done = subprocess.run(
        [command, "http://127.0.0.1:9/charges/"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr  # httpx is the extra's
    assert 'pip install "idempotency-django[conformance]"' in done.stderr


def test_function_view_as_the_quick_start_shows(site: Runserver) -> None:
    first = assert_protected(site, "/charges/", {"amount": 1000})
    location = first.header("Location")
    assert location == f"/charges/{json.loads(first.body)['id']}/"
    assert site.request("GET", location).status == 200


def test_class_based_view_as_the_quick_start_shows(site: Runserver) -> None:
    charge = post(site, "/charges/", {"amount": 700}, "first-contact-cbv-charge")
    assert charge.status == 201
    assert_protected(site, f"/charges/{json.loads(charge.body)['id']}/refunds/", {"amount": 300})


def test_safe_methods_pass_through(site: Runserver) -> None:
    assert site.request("GET", "/charges/").status == 405  # require_POST, no key needed


def test_drf_viewset_as_the_quick_start_shows(drf_site: Runserver) -> None:
    first = assert_protected(drf_site, "/api/charges/", {"amount": 500}, Authorization=ALICE)
    assert json.loads(first.body)["amount"] == 500


def test_drf_refusals_are_never_stored(drf_site: Runserver) -> None:
    key = "first-contact-anonymous"
    refused = post(drf_site, "/api/charges/", {"amount": 5}, key)
    assert refused.status in (401, 403)
    assert post(drf_site, "/api/charges/", {"amount": 5}, key, Authorization=ALICE).status == 201


def test_ninja_operation_as_the_docs_show(ninja_site: Runserver) -> None:
    first = assert_protected(
        ninja_site, "/ninja/charges", {"amount": 500}, **{"X-API-Key": "key-alice"}
    )
    assert json.loads(first.body)["amount"] == 500
    # Another API key, the same Idempotency-Key: a key space of its own, never alice's answer.
    key = "first-contact-/ninja/charges"
    bob = post(ninja_site, "/ninja/charges", {"amount": 500}, key, **{"X-API-Key": "key-bob"})
    assert (bob.status, bob.header("Idempotent-Replayed")) == (201, None)
    assert json.loads(bob.body)["id"] != json.loads(first.body)["id"]
    refused = post(ninja_site, "/ninja/charges", {"amount": 5}, "first-contact-ninja-401")
    assert refused.status == 401
    docs = ninja_site.request("GET", "/ninja/docs")
    assert docs.status == 200
    assert b"cdn" not in docs.body.lower()


def test_every_other_extra_installs_and_imports(workdir: Path, dist: Dist) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    venv = Venv(workdir / "venv-extras")
    venv.pip_install(f"{dist.wheel}[{','.join(sorted(extras))}]")
    code = (
        "import sys, django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['django.contrib.auth', 'django.contrib.contenttypes', "
        "'rest_framework', 'drf_spectacular', 'idempotency_django'], "
        "DATABASES={'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}})\n"
        "django.setup()\n"
        "import idempotency_django.rest_framework, idempotency_django.tasks, django_redis, psycopg\n"
        "import idempotency_django.ninja, adrf, idempotency_django.django_tasks\n"
        "from django.core.management import call_command; call_command('check')\n"
        "print('spectacular' if 'idempotency_django._adapters.spectacular' in sys.modules else 'none')\n"
    )
    assert venv.python(code).split()[-1] == "spectacular"


def test_strawberry_alone_brings_graphql_core_3_3_and_the_adapter_builds_there(
    workdir: Path, dist: Dist
) -> None:
    """``[strawberry]`` alone resolves the newest Strawberry and graphql-core 3.3 (beside
    graphene, above, pip keeps 3.2): 0.6's first cut imported 3.2's ``ExecutionContext``,
    which 3.3 renamed ``Executor``, and the adapter did not import there."""
    venv = Venv(workdir / "venv-strawberry")
    venv.pip_install(f"{dist.wheel}[strawberry]")
    code = (
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['django.contrib.auth', 'django.contrib.contenttypes', "
        "'idempotency_django'], "
        "DATABASES={'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}})\n"
        "django.setup()\n"
        "import graphql, idempotency_django.strawberry\n"
        "from idempotency_django._adapters import graphql_fields\n"
        "schema = graphql.build_schema('type Query { a: Int } type Mutation { pay(n: Int): Int }')\n"
        "document = graphql.parse('mutation M { pay(n: 1) }')\n"
        "built = graphql_fields._Executor.build(schema, document, None, None, {}, 'M')\n"
        "print(graphql.__version__, built.operation.operation.value)\n"
    )
    version, operation = venv.python(code).split()[-2:]
    assert tuple(map(int, version.split(".")[:2])) >= (3, 3), version
    assert operation == "mutation"
