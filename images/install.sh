#!/bin/sh
# The image build steps, shared by images/sidecar.Dockerfile, images/operator.Dockerfile and the
# refund example's agent.Dockerfile. Nothing here reaches the network: every wheel comes from the
# build context, a wheelhouse made on the host by tools/images.py.
#
#   install.sh wheel SRC OUT     (on the host) build the agentsaga wheel of the project at SRC
#                                into OUT
#   install.sh deps WHEELS VENV LOCK
#                                create the virtualenv VENV (without pip) and install the dependencies pinned
#                                in the requirements file LOCK (images/<image>.requirements.lock)
#                                from the folder WHEELS alone (--no-index), every one checked
#                                against its sha256 (--require-hashes)
#   install.sh product WHEELS VENV
#                                install the wheel of this repository in WHEELS (the product's,
#                                agentsaga, or the agent side's, agentsaga_client) into VENV
#                                without resolving anything (--no-deps), check that every
#                                requirement is met (pip check), run `agentsaga --help` (the
#                                product) or import the client (the agent side)
#
# Extra flags, empty by default: AGENTSAGA_WHEEL_FLAGS (pip wheel), AGENTSAGA_VENV_FLAGS
# (python -m venv), AGENTSAGA_PIP_FLAGS (pip install). PYTHON picks the interpreter.
set -eu
PYTHON="${PYTHON:-python3}"
command="${1:?usage: install.sh wheel SRC OUT | deps WHEELS VENV LOCK | product WHEELS VENV}"

# `python -m` puts the working directory first on sys.path, and the project's operator/ folder
# would shadow the standard library's `operator` module: make paths absolute, then leave.
absolute() { mkdir -p "$1" && (cd "$1" && pwd); }
# pip runs from a throwaway virtualenv and installs into VENV (`pip --python`): the image's
# environment holds no installer (pip, setuptools), only what its process imports.
installer=/tmp/agentsaga-installer
pip() {
  [ -x "$installer/bin/python" ] || "$PYTHON" -m venv "$installer"
  "$installer/bin/python" -m pip --python "$venv/bin/python" --disable-pip-version-check "$@"
}
pip_install() {
  # shellcheck disable=SC2086  # flags are word lists
  pip install --no-cache-dir --no-index --no-deps ${AGENTSAGA_PIP_FLAGS:-} "$@"
}

case "$command" in
  wheel)
    src="$(absolute "${2:?SRC}")"; out="$(absolute "${3:?OUT}")"
    cd /
    # shellcheck disable=SC2086
    "$PYTHON" -m pip wheel --no-cache-dir --no-deps ${AGENTSAGA_WHEEL_FLAGS:-} --wheel-dir "$out" "$src"
    ;;
  deps)
    wheels="$(absolute "${2:?WHEELS}")"; venv="${3:?VENV}"; lock="${4:?LOCK}"
    case "$venv" in /*) ;; *) venv="$(pwd)/$venv" ;; esac
    case "$lock" in /*) ;; *) lock="$(pwd)/$lock" ;; esac
    cd /
    # shellcheck disable=SC2086
    "$PYTHON" -m venv --without-pip ${AGENTSAGA_VENV_FLAGS:-} "$venv"
    pip_install --require-hashes --only-binary=:all: --find-links "$wheels" -r "$lock"
    rm -rf "$installer"
    ;;
  product)
    wheels="$(absolute "${2:?WHEELS}")"; venv="${3:?VENV}"
    case "$venv" in /*) ;; *) venv="$(pwd)/$venv" ;; esac
    cd /
    set -- "$wheels"/agentsaga-*.whl "$wheels"/agentsaga_client-*.whl
    for wheel do
      if [ -e "$wheel" ]; then pip_install "$wheel"; fi
    done
    pip check
    rm -rf "$installer"
    if [ -e "$venv/bin/agentsaga" ]; then
      "$venv/bin/agentsaga" --help >/dev/null
    else
      "$venv/bin/python" -P -c "import agentsaga.client"
    fi
    ;;
  *)
    echo "install.sh: unknown command $command" >&2
    exit 2
    ;;
esac
