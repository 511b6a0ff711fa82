# The two commands: `make demo` and `make test`. Both create or reuse .venv and install what they
# need from this project's own files.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint tools clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/agentsaga demo

tools: $(STAMP)
	$(PY) tools/install_binaries.py

test: $(STAMP) tools
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy agentsaga sidecar operator

clean:
	rm -rf $(VENV) tools/bin .pytest_cache
