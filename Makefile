# The two commands of the README. Both create .venv and install what they need on first use,
# the native reader included (SERVECHECK_BUILD_NATIVE=1; a wheel is pure Python without it).
#   make check   conformance run against the embedded reference server, report under reports/
#   make test    servecheck's own self-tests
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: check test venv docs lint typecheck bench clean

$(STAMP): pyproject.toml setup.py servecheck/load/generator/_rxthread.c servecheck/load/generator/_lane.c servecheck/load/generator/_rxcommon.h servecheck/analysis/_hdrfast.c servecheck/records/_line.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	@SERVECHECK_BUILD_NATIVE=1 $(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev,engines,langchain,otlp]'
	@touch $(STAMP)

venv: $(STAMP)

check: $(STAMP)
	$(BIN)/servecheck check

test: $(STAMP)
	$(BIN)/python -m pytest -n auto

docs: $(STAMP)
	$(BIN)/python -m servecheck.docs

lint: $(STAMP)
	$(BIN)/ruff check servecheck tests suites scenarios
	$(BIN)/python scripts/complexity.py

typecheck: $(STAMP)
	$(BIN)/mypy servecheck

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) reports/*/ .pytest_cache
