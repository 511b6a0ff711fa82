# The two commands: `make demo` and `make test`. Both create or reuse .venv and install what they
# need from this project's own files.
#
# `-P` keeps the current directory off sys.path: this folder's operator/ (installed as
# agentsaga.operator) must never shadow the standard library's `operator` module.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint tools clean

$(STAMP): pyproject.toml setup.py
	@$(PYTHON) -P -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "agentsaga needs Python 3.11 or newer (set PYTHON=...)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -P -m venv $(VENV)
	$(PY) -P -m pip install -q --upgrade pip
	$(PY) -P -m pip install -q -e '.[test]'
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/agentsaga demo

tools: $(STAMP)
	$(PY) -P tools/install_binaries.py

test: $(STAMP) tools
	$(PY) -P -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -P tools/typecheck.py

clean:
	rm -rf $(VENV) tools/bin .pytest_cache
