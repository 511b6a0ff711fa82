#!/bin/sh
# The image build steps, shared by sidecar.Dockerfile and operator.Dockerfile and run as-is by
# tests/integration/test_chart_images.py (no Docker engine needed to check them).
#
#   install.sh wheel SRC OUT     build the agentsaga wheel of the project at SRC into OUT
#   install.sh venv OUT VENV [LOCK]
#                                create the virtualenv VENV; install the dependencies pinned in the
#                                requirements file LOCK (images/requirements.lock), every one
#                                checked against its sha256 (--require-hashes), then the wheel
#                                from OUT without resolving anything else (--no-deps)
#
# Extra flags, empty by default: AGENTSAGA_WHEEL_FLAGS (pip wheel), AGENTSAGA_VENV_FLAGS
# (python -m venv), AGENTSAGA_PIP_FLAGS (pip install). PYTHON picks the interpreter.
set -eu
PYTHON="${PYTHON:-python3}"
command="${1:?usage: install.sh wheel SRC OUT | venv OUT VENV}"

# `python -m` puts the working directory first on sys.path, and the project's operator/ folder
# would shadow the standard library's `operator` module: make paths absolute, then leave.
absolute() { mkdir -p "$1" && (cd "$1" && pwd); }

case "$command" in
  wheel)
    src="$(absolute "${2:?SRC}")"; out="$(absolute "${3:?OUT}")"
    cd /
    # shellcheck disable=SC2086  # flags are word lists
    "$PYTHON" -m pip wheel --no-cache-dir --no-deps ${AGENTSAGA_WHEEL_FLAGS:-} --wheel-dir "$out" "$src"
    ;;
  venv)
    out="$(absolute "${2:?OUT}")"; venv="${3:?VENV}"; lock="${4:-}"
    case "$venv" in /*) ;; *) venv="$(pwd)/$venv" ;; esac
    case "$lock" in /*|"") ;; *) lock="$(pwd)/$lock" ;; esac
    cd /
    # shellcheck disable=SC2086
    "$PYTHON" -m venv ${AGENTSAGA_VENV_FLAGS:-} "$venv"
    if [ -n "$lock" ]; then
      "$venv/bin/python" -m pip install --no-cache-dir --disable-pip-version-check \
        --require-hashes --no-deps --only-binary=:all: -r "$lock"
    fi
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install --no-cache-dir --disable-pip-version-check --no-deps \
      ${AGENTSAGA_PIP_FLAGS:-} "$out"/agentsaga-*.whl
    if [ -n "$lock" ]; then
      "$venv/bin/python" -m pip check
    fi
    "$venv/bin/agentsaga" --help >/dev/null
    ;;
  *)
    echo "install.sh: unknown command $command" >&2
    exit 2
    ;;
esac
