PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-install

.PHONY: venv install test demo clean

venv: $(BIN)/python

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when pyproject.toml is newer than the stamp.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: install
	$(BIN)/python -m pytest

demo: install
	$(BIN)/taxcompile check specs/
	@echo
	@echo "Table III, derived from the specs' structure:"
	@$(BIN)/taxcompile table specs/

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
