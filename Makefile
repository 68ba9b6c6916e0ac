# One entry point for everything: `make run` sets up and runs the service, `make test` runs the suite.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
ARGS   ?=

.PHONY: venv ts-deps gen check-gen check-compat lint typecheck test run bench bench-quick demo clean

venv: $(STAMP)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,bench]' 2>&1 | { grep -vE "^WARNING: Location 'file:" || true; }
	rm -f $(VENV)/.installed-*
	touch $@

# The Node packages of consumers/ts (Ajv, json-schema-to-typescript, TypeScript, the OpenRPC
# meta-schema), from its lockfile. Without npm the Node tests fail and say how to install it.
TS_DIR   := consumers/ts
TS_STAMP := $(TS_DIR)/node_modules/.package-lock.json

ts-deps: $(TS_STAMP)
$(TS_STAMP): $(TS_DIR)/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix $(TS_DIR) --no-audit --no-fund; \
	else echo "npm is missing (apt-get install -y nodejs npm): the Node tests will fail" >&2; fi

gen: venv
	$(PY) scripts/gen_types.py

check-gen: venv
	$(PY) scripts/gen_types.py --check

# schema/ against the last released contract (schema/released/<major>.x): breaking needs a major bump.
check-compat: venv
	$(PY) scripts/schema_compat.py

LINTED := $(wildcard src tests bench scripts)

lint: venv
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

typecheck: venv
	$(VENV)/bin/mypy src

test: check-gen check-compat lint typecheck ts-deps
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
