# Each target is a one-line alias of what CI (.ci/run) and the README say.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/idempotency
MARIADB_URL ?= mysql://root@127.0.0.1:3306/idempotency
PORT ?= 8000
export PG_URL MARIADB_URL

# setuptools announces every editable install of a flat layout with a boxed "Editable
# installation" notice (folders named like the package may shadow it: here the package is
# the folder), which pip >= 25 shows even under -q; it reads like an error, so it is hidden.
PIP := PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip

# A .venv made by another Python (3.10, or python3 upgraded since) is made again from
# scratch: pip would refuse the package there ("requires a different Python").
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
VENV_VERSION := $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
VENV_STALE := $(if $(VENV_VERSION),$(filter-out $(PYTHON_VERSION),$(VENV_VERSION)))
NEW_VENV := $(PYTHON) -m venv $(if $(VENV_STALE),--clear )$(VENV)

.PHONY: FORCE install services run test test-sqlite test-postgres test-postgres-in-process test-postgres-system test-mariadb lint docs docs-clean-env dist first-contact bench stress tox tox-corners clean

# mysqlclient (the dev group's MySQL driver) builds against Debian's libmariadb-dev: as root,
# tests/services/up.sh installs it first.
$(VENV)/.installed: pyproject.toml $(if $(VENV_STALE),FORCE)
	bash tests/services/up.sh packages && $(NEW_VENV) && $(PIP) install -q --upgrade pip && $(PIP) install -q -e . --group dev && touch $@

install: $(VENV)/.installed

# The sample's own dependencies only (the `sample` group, not the linters and stubs of `dev`).
$(VENV)/.sample: pyproject.toml $(if $(VENV_STALE),FORCE)
	$(if $(VENV_STALE),$(NEW_VENV),test -x $(PY) || $(NEW_VENV))
	$(PIP) install -q --upgrade pip && $(PIP) install -q -e . --group sample && touch $@

run: $(VENV)/.sample
	$(PY) manage.py migrate --noinput && $(PY) sample_project/hint.py $(PORT)

# The full suite, as CI runs it: SQLite, PostgreSQL, MariaDB, then the multi-database and
# pooler tiers, with Redis, the Celery brokers and NATS; a missing service FAILS it
# (`make test SERVICES=optional`: those tests skip instead).
# Services, variables and databases: docs/contributing.rst.
SERVICES ?= required

# Installs (as root) and starts what the tests need; else fails naming `sudo make services`.
services:
	SERVICES=$(SERVICES) bash tests/services/up.sh

# Every tier runs, whichever failed before it, in four lanes side by side (tests/tiers.sh),
# each lane with databases of its own; then each tier's time, the coverage report of them
# all, and the run fails naming each tier that failed.
test: services install
	MAKE="$(MAKE)" SERVICES=$(SERVICES) PY=$(PY) bash tests/tiers.sh

# The quick local run: SQLite only, no service needed (tests needing one skip, saying
# why), unless SERVICES is given on the command line, as `make test` does.
test-sqlite: install
	IDEMPOTENCY_TEST_SERVICES=$(if $(filter command line,$(origin SERVICES)),$(SERVICES),optional) $(PY) -m coverage run -p -m pytest

# The server passes run only the tests a database concerns (IDEMPOTENCY_TEST_DATABASE_ONLY):
# the rest ran in test-sqlite (docs/contributing.rst, "What runs where").
ONLY_DB := IDEMPOTENCY_TEST_DATABASE_ONLY=1
PG_PASS := $(ONLY_DB) DATABASE_URL=$(PG_URL) IDEMPOTENCY_TEST_SERVICES=$(SERVICES) $(PY) -m coverage run -p -m pytest

# PostgreSQL's pass is two tiers, which `make test` runs side by side: the system tests
# (marked `system`: the sample under gunicorn, Celery and db_worker workers, consumers on
# real brokers) and the rest, in process, with the race files again under the inserting claim.
test-postgres: test-postgres-in-process test-postgres-system

test-postgres-in-process: install
	$(PG_PASS) -m "not system and not packaging"
	IDEMPOTENCY_TEST_CLAIM=inserting $(PG_PASS) tests/test_concurrency.py tests/test_lock_protocol.py tests/test_stateful.py tests/test_queries.py

test-postgres-system: install
	$(PG_PASS) -m "system and not packaging"

# The suite on MariaDB (or MySQL 8): "lease" only, the races and crash tests included; the
# stacks' faces (`faces`) ran under "lease" on SQLite already (docs/contributing.rst).
test-mariadb: install
	$(ONLY_DB) DATABASE_URL=$(MARIADB_URL) IDEMPOTENCY_TEST_SERVICES=$(SERVICES) $(PY) -m coverage run -p -m pytest

lint: install
	$(PY) -m ruff check . && $(PY) -m ruff format --check . && $(PY) -m mypy idempotency_django tests sample_project bench

docs: install
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs build/docs

# The hosted build replayed: tracked files only, a new virtualenv, .readthedocs.yaml's
# install commands as written, Sphinx as Read the Docs calls it (needs PyPI).
docs-clean-env: install
	$(PY) -m pytest -p no:randomly -m packaging tests/packaging/test_docs_clean_env.py

# The wheel and the sdist, checked as PyPI would (twine check --strict).
dist: install
	rm -rf dist && $(PY) -m build --outdir dist . && $(PY) -m twine check --strict dist/*

# Builds the wheel, installs it with only Django (then [drf]) in a fresh virtualenv and
# drives a new `startproject` through the quickstart (docs/examples/).
first-contact: install
	$(PY) -m pytest -p no:randomly -m packaging tests/packaging --ignore tests/packaging/test_docs_clean_env.py

# BENCH_COMPARE=/path/to/venv/bin/python: bench.cpu beside another install (0.4.3: docs/performance.rst).
bench: install
	DATABASE_URL=$(PG_URL) $(PY) -m bench.added
	DATABASE_URL=$(PG_URL) $(PY) -m bench.cpu $(if $(BENCH_COMPARE),--compare $(BENCH_COMPARE))
	DATABASE_URL=$(PG_URL) $(PY) -m bench
	DATABASE_URL=$(PG_URL) $(PY) -m bench.seal
	BENCH_MARIADB_URL=$(MARIADB_URL) $(PY) -m bench.mysql
	$(PY) -m bench.walk

stress: install
	DATABASE_URL=$(PG_URL) $(PY) -m bench.stress

# tox finds the matrix's interpreters on PATH; pyenv keeps them out of it.
PYENV_BINS := $(shell ls -d $(HOME)/.pyenv/versions/3.1[123]*/bin 2>/dev/null | tr '\n' ':')

tox: install
	PATH="$(PYENV_BINS)$$PATH" $(VENV)/bin/tox run-parallel

# CI's share of the matrix: its oldest and newest corners on PostgreSQL, from the built wheel,
# in process, the tests marked `versions` only: what a Python or Django version can change
# (imports, the adapters, a smoke of each protocol); the rest runs once, in `make test`.
TOX_CORNERS := py311-dj52-postgres,py313-dj61-postgres

tox-corners: install
	PATH="$(PYENV_BINS)$$PATH" $(VENV)/bin/tox run-parallel -e $(TOX_CORNERS) -- -m "versions and not packaging and not system"

# Past one database (docs/contributing.rst): shards and a replica (SQLite, PostgreSQL, then
# MariaDB without the matrix, which has no MariaDB chooser combination), then the race,
# crash and wait tests through PgBouncer (transaction mode) and Django's pool.
.PHONY: test-multidb test-poolers conformance-full conformance-peers
test-multidb: install
	IDEMPOTENCY_TEST_SERVICES=$(SERVICES) $(PY) -m coverage run -p -m pytest --ds tests.multidb.settings tests/multidb $(MATRIX_TESTS)
	$(ONLY_DB) DATABASE_URL=$(PG_URL) IDEMPOTENCY_TEST_SERVICES=$(SERVICES) $(PY) -m coverage run -p -m pytest --ds tests.multidb.settings tests/multidb $(MATRIX_TESTS)
	$(ONLY_DB) DATABASE_URL=$(MARIADB_URL) IDEMPOTENCY_TEST_SERVICES=$(SERVICES) $(PY) -m coverage run -p -m pytest --ds tests.multidb.settings tests/multidb

# The conformance matrix's combinations each run in the tier that provides them (test-sqlite,
# test-postgres and test-mariadb collect it with the rest of tests/).
MATRIX_TESTS := tests/conformance/test_matrix.py
POOLED_TESTS := tests/pooled tests/test_concurrency.py tests/test_lock_protocol.py tests/test_faults.py $(MATRIX_TESTS)
test-poolers: install
	tests/services/pgbouncer.sh start
	DATABASE_URL=$(PG_URL) IDEMPOTENCY_TEST_SERVICES=$(SERVICES) IDEMPOTENCY_TEST_POOLER=pgbouncer $(PY) -m coverage run -p -m pytest --ds tests.pooled.settings $(POOLED_TESTS); status=$$?; tests/services/pgbouncer.sh stop; exit $$status
	DATABASE_URL=$(PG_URL) IDEMPOTENCY_TEST_SERVICES=$(SERVICES) IDEMPOTENCY_TEST_POOLER=psycopg $(PY) -m coverage run -p -m pytest --ds tests.pooled.settings $(POOLED_TESTS)

FORCE:

clean:
	rm -rf $(VENV) .tox dist build .coverage .coverage.* .mypy_cache .ruff_cache .hypothesis sample_project/db.sqlite3

# The conformance scenarios over the full product of the matrix (CI runs its pairwise set),
# in every tier; each tier skips the combinations another one provides (docs/verify.rst).
CONFORMANCE_FULL := IDEMPOTENCY_CONFORMANCE_MATRIX=full IDEMPOTENCY_TEST_SERVICES=$(SERVICES) $(PY) -m pytest -p no:randomly -q -k keeps_the_contract $(MATRIX_TESTS)
conformance-full: install
	$(CONFORMANCE_FULL)
	DATABASE_URL=$(PG_URL) $(CONFORMANCE_FULL)
	DATABASE_URL=$(MARIADB_URL) $(CONFORMANCE_FULL)
	$(CONFORMANCE_FULL) --ds tests.multidb.settings
	DATABASE_URL=$(PG_URL) $(CONFORMANCE_FULL) --ds tests.multidb.settings
	tests/services/pgbouncer.sh start
	DATABASE_URL=$(PG_URL) IDEMPOTENCY_TEST_POOLER=pgbouncer $(CONFORMANCE_FULL) --ds tests.pooled.settings; status=$$?; tests/services/pgbouncer.sh stop; exit $$status
	DATABASE_URL=$(PG_URL) IDEMPOTENCY_TEST_POOLER=psycopg $(CONFORMANCE_FULL) --ds tests.pooled.settings

# The runner against idempotency packages from PyPI and npm (Django, FastAPI, Express, NestJS),
# each in an environment and app of its own; every verdict is checked against the rows the app
# recorded, and any disagreement fails (downloads: not in CI); docs/verify.rst has the table.
conformance-peers: install
	RUNNER=$(PY) tests/conformance/peers/run.sh
