# One entry point for everything: `make run` sets up and runs the service, `make test` runs the suite.
#
# Two installs into one .venv, each with its own stamp (named by a hash of pyproject.toml, so an
# edited pyproject.toml reinstalls): `run` has only the runtime dependencies; `dev` (make test,
# make bench, make venv) adds the dev and bench extras and also satisfies `run`.
# `make run` keeps stdout for the daemon alone: no command echo (@), pip and venv write to stderr.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
MAKEFLAGS += --no-print-directory
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
HASH   := $(shell sha256sum pyproject.toml | cut -c1-12)
RUN_STAMP := $(VENV)/.installed-run-$(HASH)
DEV_STAMP := $(VENV)/.installed-dev-$(HASH)
ARGS   ?=
# pip's output goes to stderr; one machine-specific warning about a missing local index is noise.
PIP_QUIET := 2>&1 | { grep -vE "^WARNING: Location 'file:" || true; } >&2

.PHONY: venv venv-run ts-deps gen check-gen check-compat lint typecheck test h2spec run bench bench-quick demo clean

venv: $(DEV_STAMP)
venv-run: $(RUN_STAMP)

$(PY):
	@$(PYTHON) -m venv $(VENV) >&2
	@$(PY) -m pip install --quiet --upgrade pip $(PIP_QUIET)

$(RUN_STAMP): pyproject.toml | $(PY)
	@echo "make: installing nvpair-wm and its runtime dependencies into $(VENV)" >&2
	@$(PY) -m pip install --quiet -e . $(PIP_QUIET)
	@rm -f $(VENV)/.installed-run-*
	@touch $@

$(DEV_STAMP): pyproject.toml | $(PY)
	@echo "make: installing nvpair-wm with the dev and bench extras into $(VENV)" >&2
	@$(PY) -m pip install --quiet -e '.[dev,bench]' $(PIP_QUIET)
	@rm -f $(VENV)/.installed-*
	@touch $@ $(RUN_STAMP)

# The Node packages of consumers/ts (Ajv, json-schema-to-typescript, TypeScript, the OpenRPC
# meta-schema), from its lockfile. Without npm the Node tests fail and say how to install it.
TS_DIR   := consumers/ts
TS_STAMP := $(TS_DIR)/node_modules/.package-lock.json

ts-deps: $(TS_STAMP)
$(TS_STAMP): $(TS_DIR)/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix $(TS_DIR) --no-audit --no-fund; \
	else echo "npm is missing (apt-get install -y nodejs npm): the Node tests will fail" >&2; fi

# quicktype for tests/test_quicktype.py (what the mainstream generator makes of schema/), pinned
# by its own lockfile.
QT_DIR   := tests/quicktype
QT_STAMP := $(QT_DIR)/node_modules/.package-lock.json

ts-deps: $(QT_STAMP)
$(QT_STAMP): $(QT_DIR)/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix $(QT_DIR) --no-audit --no-fund; \
	else echo "npm is missing (apt-get install -y nodejs npm): the quicktype test will fail" >&2; fi

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
	$(VENV)/bin/mypy $(LINTED)

# pytest in two phases. First every test not marked `serial` on TEST_JOBS workers (pytest-xdist;
# most tests wait on processes and sockets, so more workers than cores pay; --dist loadfile: a
# file's tests run on one worker, so a module- or session-scoped fixture is made once, and the
# Windows checks share one wineserver; xdist_group marks do not group under pytest 9). Then the
# `serial` tests, which assert a wall-clock bound, one at a time on an otherwise idle suite.
# ARGS goes to both phases;
# exit status 5 is "ARGS selected no serial test". TEST_JOBS=0 runs the first phase in-process.
TEST_JOBS ?= 4

test: check-gen check-compat lint typecheck ts-deps
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile -m "not serial" $(ARGS)
	$(PY) -m pytest -m serial $(ARGS) || [ $$? -eq 5 ]

# RFC 9113 conformance with the external h2spec ($$H2SPEC, PATH or ../shared/tools/h2spec; README:
# h2spec). make test runs it too when it is found, and says in one line when it is not.
h2spec: venv
	@scripts/h2spec.sh $(ARGS)

run: venv-run
	@$(VENV)/bin/nvpair-wm $(ARGS)

# stdout: the summary table, then the files it wrote (details: bench/results/latest.txt);
# stderr: one line per benchmark as the run goes.
bench: venv
	@$(PY) -m bench $(ARGS)

bench-quick: venv
	@$(PY) -m bench --quick $(ARGS)

demo: venv-run
	@$(PY) -m nvpair_wm.demo $(ARGS)

clean:
	rm -rf $(VENV) .releases .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist

# Seeded fault-injection soak (tests/soak): make soak ARGS="--seed S --minutes M --nodes N"
.PHONY: soak
soak: venv
	$(PY) -m tests.soak $(ARGS)

# h2 as the oracle (tests/test_h2_oracle.py) over more sequences than `make test` runs:
# make fuzz SEED=S N=COUNT
SEED ?= 9113
N    ?= 50000
.PHONY: fuzz
fuzz: venv
	H2_ORACLE_SEED=$(SEED) H2_ORACLE_N=$(N) $(PY) -m pytest tests/test_h2_oracle.py -q

# The mutation check of the conformance kit (scripts/kit_mutation.py): cosmic-ray over the
# daemon's decision code with the kit as the test command; long, not part of make test.
# make kit-mutation MUTATE="versions sync" (default: every module); build/mutation keeps the
# sessions, so a second run resumes; the report is schema/conformance/mutation/mutation-report.md.
# MUTATION_OPERATORS=all runs every mutant cosmic-ray makes, not only the sufficient set.
MUTATE ?=
MUTATION_OPERATORS ?= sufficient
# MUTATION_FLAGS=--changed-only runs only the mutants of lines changed since the results.
MUTATION_FLAGS ?=
.PHONY: kit-mutation
kit-mutation: venv
	@$(PY) -m pip install --quiet -e '.[dev,bench,mutation]' $(PIP_QUIET)
	$(PY) scripts/kit_mutation.py run --operators $(MUTATION_OPERATORS) $(MUTATION_FLAGS) $(MUTATE)
	$(PY) scripts/kit_mutation.py recheck --jobs 2
	$(PY) scripts/kit_mutation.py report
