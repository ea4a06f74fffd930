# The two commands a newcomer runs: `make plan` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev

.PHONY: plan test render bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

plan: $(VENV)/.installed
	$(BIN)/inferstack plan $(STACK)

render: $(VENV)/.installed
	$(BIN)/inferstack render $(STACK) --out build/$(STACK)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

# Wall time and peak memory of `plan` (dev, prod, 10/50/200 generated services) beside the floor of
# Pulumi alone, the growth with services, and the fixed model mix's placements: JSON lines.
bench: $(VENV)/.installed
	$(BIN)/python -m inferstack.bench

clean:
	rm -rf $(VENV) build .pytest_cache
