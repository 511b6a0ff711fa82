"""`--tools` as a first user writes it: a module in the current directory, a file path; what
goes wrong said in one line (shadowing, `file:line: error`, a module that registers nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentsaga import subprocesses
from agentsaga.errors import ConfigurationError
from agentsaga.loading import load_tools
from sagatest.cli_tools import agentsaga

HELLO = '''from agentsaga import tool


@tool(cls="pure")
def hello(name: str) -> dict:
    return {"greeting": "hello " + name}
'''


def serve_once(tools: str, dsn: str, cwd: Path) -> tuple[int | None, str]:
    """Start `agentsaga sidecar`, read until it listens or exits; (exit code or None, output)."""
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "agentsaga.cli", "sidecar", "--tools", tools,
         "--listen", "127.0.0.1:0", "--dsn", dsn],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "listening on" in line:
            subprocesses.stop(proc)
            proc.stdout.close()
            return None, "".join(seen)
    proc.stdout.close()
    return proc.wait(timeout=30), "".join(seen)


@pytest.mark.parametrize("spec", ["mytools", "./mytools.py"])
def test_a_tools_module_in_the_current_directory_or_a_file_is_served(
        spec: str, pg: str, tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text(HELLO)
    code, output = serve_once(spec, pg, tmp_path)
    assert code is None, output
    assert "(pid" in output and "1 tools)" in output


def test_a_syntax_error_is_reported_as_file_line(pg: str, tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text(HELLO + "\ndef broken(:\n    pass\n")
    code, output = serve_once("mytools", pg, tmp_path)
    assert code == 2
    assert f"{tmp_path / 'mytools.py'}:8: SyntaxError: " in output
    assert "Traceback" not in output


def test_an_error_at_import_names_the_users_line(pg: str, tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text(
        HELLO + '\n\n@tool(cls="compensatable")\ndef refund(order: str, idempotency_key: str) -> '
        'dict:\n    return {}\n')
    code, output = serve_once("./mytools.py", pg, tmp_path)
    assert code == 2
    assert (f"{tmp_path / 'mytools.py'}:9: RegistrationError: tool 'refund' is compensatable "
            "but declares no compensate=") in output, output
    assert "Traceback" not in output


def test_a_missing_module_says_where_it_was_looked_for(pg: str, tmp_path: Path) -> None:
    code, output = serve_once("mytools", pg, tmp_path)
    assert code == 2
    assert f"no module named 'mytools' in the current directory ({tmp_path})" in output
    missing_file = serve_once("./nothere.py", pg, tmp_path)
    assert missing_file[0] == 2 and "tools file './nothere.py' does not exist" in missing_file[1]


def test_a_module_shadowed_by_the_standard_library_is_explained(pg: str,
                                                                tmp_path: Path) -> None:
    (tmp_path / "email.py").write_text(HELLO)
    code, output = serve_once("email", pg, tmp_path)
    assert code == 2
    assert f"your {tmp_path / 'email.py'} is shadowed by the standard library's 'email'" in (
        output), output
    assert "--tools ./email.py" in output
    code, output = serve_once("./email.py", pg, tmp_path)
    assert code == 2
    assert "its name 'email' is the name of the standard library's 'email'" in output
    assert "Rename the file (e.g. email_tools.py)" in output


def test_a_folder_without_init_that_hides_a_package_is_explained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tools module importing `acmelib`, where a checkout folder `acmelib/` (no
    __init__.py) is what Python finds: the baffling "(unknown location)" gets a reason."""
    (tmp_path / "acmelib").mkdir()
    (tmp_path / "acme_tools.py").write_text("from acmelib import client\n" + HELLO)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ConfigurationError) as error:
            load_tools(["acme_tools"])
    finally:
        for name in ("acmelib", "acme_tools"):
            sys.modules.pop(name, None)
    message = str(error.value)
    assert f"{tmp_path / 'acme_tools.py'}:1: ImportError: cannot import name 'client'" in message
    assert f"'acmelib' was imported from the folder(s) {tmp_path / 'acmelib'}, which have no " \
           "__init__.py" in message


def test_no_tools_and_an_empty_module_suggest_tools(pg: str, tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("X = 1\n")
    code, output = serve_once("./empty.py", pg, tmp_path)
    assert code == 2
    assert "the tools modules ./empty.py registered no tools; pass --tools MODULE" in output
    nothing = agentsaga("sidecar", "--dsn", pg, "--listen", "127.0.0.1:0", cwd=tmp_path,
                        env={"AGENTSAGA_TOOLS": ""})
    assert nothing.returncode == 2
    assert "no tools configured: pass --tools MODULE" in nothing.stderr
    reconcile = agentsaga("reconcile", "--run", "r", "--dsn", pg, cwd=tmp_path,
                          env={"AGENTSAGA_TOOLS": ""})
    assert reconcile.returncode == 2
    assert "reconcile needs the run's tools to look its steps up by key: pass --tools " \
           "MODULE" in reconcile.stderr
