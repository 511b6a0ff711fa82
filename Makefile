# The two commands: `make demo` and `make test`. Both create or reuse .venv and install what they
# need from this project's own files.
#
# `-P` keeps the current directory off sys.path: this folder's operator/ (installed as
# agentsaga.operator) must never shadow the standard library's `operator` module.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test lint tools clean
.PRECIOUS: $(VENV)/.installed-%

# .venv/.installed-demo: the package with the [demo] extra; .venv/.installed-test: with [test]
# (which includes demo and bench).
$(VENV)/.installed-%: pyproject.toml setup.py
	@$(PYTHON) -P -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "agentsaga needs Python 3.11 or newer (set PYTHON=...)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -P -m venv $(VENV)
	$(PY) -P -m pip install -q --upgrade pip
	$(PY) -P -m pip install -q -e '.[$*]'
	@touch $@

demo: $(VENV)/.installed-demo
	$(VENV)/bin/agentsaga demo

tools: $(VENV)/.installed-test
	$(PY) -P tools/install_binaries.py

test: $(VENV)/.installed-test tools
	$(PY) -P -m pytest

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(PY) -P tools/typecheck.py

clean:
	rm -rf $(VENV) tools/bin .pytest_cache
