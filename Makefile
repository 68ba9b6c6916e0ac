# One entry point for everything: `make run` sets up and runs the service, `make test` runs the suite.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
ARGS   ?=

.PHONY: venv gen check-gen lint typecheck test run bench bench-quick demo clean

venv: $(STAMP)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,bench]' 2>&1 | { grep -vE "^WARNING: Location 'file:" || true; }
	rm -f $(VENV)/.installed-*
	touch $@

gen: venv
	$(PY) scripts/gen_types.py

check-gen: venv
	$(PY) scripts/gen_types.py --check

LINTED := $(wildcard src tests bench scripts)

lint: venv
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

typecheck: venv
	$(VENV)/bin/mypy src

test: check-gen lint typecheck
	$(PY) -m pytest $(ARGS)

run: venv
	$(VENV)/bin/nvpair-wm $(ARGS)

bench: venv
	$(PY) -m bench $(ARGS)

bench-quick: venv
	$(PY) -m bench --quick $(ARGS)

demo: venv
	$(PY) -m nvpair_wm.demo $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis

# Seeded fault-injection soak (tests/soak): make soak ARGS="--seed S --minutes M --nodes N"
.PHONY: soak
soak: venv
	$(PY) -m tests.soak $(ARGS)
