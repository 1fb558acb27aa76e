# Each target is a one-line alias of what CI (.ci/run) and the README say.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/idempotency
PORT ?= 8000
export PG_URL

.PHONY: install run test test-sqlite test-postgres lint docs dist first-contact bench stress tox tox-corners clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q -e . --group dev && touch $@

install: $(VENV)/.installed

# The sample's own dependencies only (the `sample` group, not the linters and stubs of `dev`).
$(VENV)/.sample: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q -e . --group sample && touch $@

run: $(VENV)/.sample
	$(PY) manage.py migrate --noinput && $(PY) sample_project/hint.py $(PORT) && $(PY) manage.py runserver 127.0.0.1:$(PORT)

# The full suite, as CI runs it: SQLite, then PostgreSQL, with Redis and a Celery broker;
# a missing service FAILS it (`make test SERVICES=optional`: those tests skip instead).
# Services, variables and databases: docs/contributing.rst.
SERVICES ?= required

test: install
	$(PY) -m coverage erase && $(MAKE) test-sqlite test-postgres SERVICES=$(SERVICES) && $(PY) -m coverage combine -q && $(PY) -m coverage report

# The quick local run: SQLite only, no service needed (tests needing one skip, saying
# why), unless SERVICES is given on the command line, as `make test` does.
test-sqlite: install
	IDEMPOTENCY_TEST_SERVICES=$(if $(filter command line,$(origin SERVICES)),$(SERVICES),optional) $(PY) -m coverage run -p -m pytest

test-postgres: install
	DATABASE_URL=$(PG_URL) IDEMPOTENCY_TEST_SERVICES=$(SERVICES) $(PY) -m coverage run -p -m pytest
	DATABASE_URL=$(PG_URL) IDEMPOTENCY_TEST_SERVICES=$(SERVICES) IDEMPOTENCY_TEST_CLAIM=inserting $(PY) -m coverage run -p -m pytest tests/test_concurrency.py tests/test_lock_protocol.py tests/test_stateful.py tests/test_queries.py

lint: install
	$(PY) -m ruff check . && $(PY) -m ruff format --check . && $(PY) -m mypy idempotency_django tests sample_project bench

docs: install
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs build/docs

# The wheel and the sdist, checked as PyPI would (twine check --strict).
dist: install
	rm -rf dist && $(PY) -m build --outdir dist . && $(PY) -m twine check --strict dist/*

# Builds the wheel, installs it with only Django (then [drf]) in a fresh virtualenv and
# drives a new `startproject` through the quickstart (docs/examples/).
first-contact: install
	$(PY) -m pytest -p no:randomly -m packaging tests/packaging

bench: install
	DATABASE_URL=$(PG_URL) $(PY) -m bench.added
	DATABASE_URL=$(PG_URL) $(PY) -m bench

stress: install
	DATABASE_URL=$(PG_URL) $(PY) -m bench.stress

# tox finds the matrix's interpreters on PATH; pyenv keeps them out of it.
PYENV_BINS := $(shell ls -d $(HOME)/.pyenv/versions/3.1[123]*/bin 2>/dev/null | tr '\n' ':')

tox: install
	PATH="$(PYENV_BINS)$$PATH" $(VENV)/bin/tox run-parallel

# CI's share of the matrix: its oldest and newest corners on PostgreSQL, from the built wheel.
TOX_CORNERS := py311-dj52-postgres,py313-dj61-postgres

tox-corners: install
	PATH="$(PYENV_BINS)$$PATH" $(VENV)/bin/tox run-parallel -e $(TOX_CORNERS)

clean:
	rm -rf $(VENV) .tox dist build .coverage .coverage.* .mypy_cache .ruff_cache .hypothesis sample_project/db.sqlite3
