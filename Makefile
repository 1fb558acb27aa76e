# Each target is a one-line alias of what CI (.ci/run) and the README say.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/idempotency
PORT ?= 8000
export PG_URL

.PHONY: install run test test-sqlite test-postgres lint docs bench stress tox clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q -e '.[dev]' && touch $@

install: $(VENV)/.installed

# The sample's own dependencies only (not the linters and stubs of `.[dev]`).
$(VENV)/.sample: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[sample]' && touch $@

run: $(VENV)/.sample
	$(PY) manage.py migrate --noinput && $(PY) sample_project/hint.py $(PORT) && $(PY) manage.py runserver 127.0.0.1:$(PORT)

test: install
	$(PY) -m coverage erase && $(MAKE) test-sqlite test-postgres && $(PY) -m coverage combine -q && $(PY) -m coverage report

test-sqlite: install
	$(PY) -m coverage run -p -m pytest

test-postgres: install
	DATABASE_URL=$(PG_URL) $(PY) -m coverage run -p -m pytest

lint: install
	$(PY) -m ruff check . && $(PY) -m ruff format --check . && $(PY) -m mypy idempotency_django tests sample_project bench

docs: install
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs build/docs

bench: install
	DATABASE_URL=$(PG_URL) $(PY) -m bench

stress: install
	DATABASE_URL=$(PG_URL) $(PY) -m bench.stress

# tox finds the matrix's interpreters on PATH; pyenv keeps them out of it.
PYENV_BINS := $(shell ls -d $(HOME)/.pyenv/versions/3.1[123]*/bin 2>/dev/null | tr '\n' ':')

tox: install
	PATH="$(PYENV_BINS)$$PATH" $(VENV)/bin/tox run-parallel

clean:
	rm -rf $(VENV) .tox .coverage .coverage.* .mypy_cache .ruff_cache .hypothesis sample_project/db.sqlite3
