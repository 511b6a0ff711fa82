"""One name for each Secret and each flag across the documents (docs/, README.md, CHANGELOG.md,
lab/README.md, examples/, the chart's README and examples): every Secret a document names is
one the chart really reads or makes for a documented install (rendered by the real helm,
release `agentsaga`; `<release>` stands for it) under the chart's default name,
and every `--flag` a document gives a command of `agentsaga` or `kubectl agentsaga` is one its
argparse parser defines, spelled as the parser's first name for it (an alias is not a second
name in the documents). A plan hash shown in a command is a whole SHA-256."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentsaga.cli import all_commands, build_parser
from agentsaga.plugin.main import build_parser as plugin_parser
from sagatest.chart_installs import documented_installs, rendered
from sagatest.chart_tools import CHART, ROOT

DOCUMENTS = sorted([*(ROOT / "docs").rglob("*.md"), CHART / "README.md",
                    *(CHART / "examples").glob("*"), ROOT / "README.md", ROOT / "CHANGELOG.md",
                    ROOT / "lab" / "README.md",
                    *(p for p in (ROOT / "examples").rglob("*")
                      if p.is_file() and p.suffix in (".md", ".yaml", ".sh", "")
                      or p.name.endswith("Dockerfile"))])
DEVELOPMENT = ("--set", "postgres.credentials.location=",
               "--set", "postgres.allowSharedCredentialForDevelopment=true")
SECRET_NAME = re.compile(
    r"(?<![\w./-])((?:<release>|[a-z0-9]+)-(?:postgres(?:-operator|-migrate)?|db-credentials"
    r"(?:-migrate)?|sidecar-access|webhook-tls))(?![\w-])")
CREATED = re.compile(r"create secret generic ([a-z0-9][-a-z0-9.]*)")
CODE = re.compile(r"```[a-z]*\n(.*?)```|`([^`\n]+)`", re.S)
INVOCATION = re.compile(r"(?<![\w./-])(kubectl\s+)?agentsaga\s+([a-z][a-z-]*)([^\n`|]*)")


def _secrets(node: Any) -> set[str]:
    """Every Secret a rendered release makes or reads (env, envFrom, volumes, the injected
    sidecar's template, which is JSON inside a ConfigMap)."""
    names: set[str] = set()
    if isinstance(node, list):
        for item in node:
            names |= _secrets(item)
    elif isinstance(node, dict):
        if node.get("kind") == "Secret":
            names.add(node["metadata"]["name"])
        for key in ("secretKeyRef", "secretRef"):
            if isinstance(node.get(key), dict):
                names.add(node[key]["name"])
        if isinstance(node.get("secretName"), str):
            names.add(node["secretName"])
        for value in node.values():
            names |= _secrets(value)
    elif isinstance(node, str) and node.startswith("{"):
        with contextlib.suppress(ValueError):
            names |= _secrets(json.loads(node))
    return names


def real_secrets() -> set[str]:
    """The chart's own names (its defaults, with per-namespace credentials and with the
    development flag), and the connectors' Secrets the documented installs name (the reader's
    choice, e.g. stripe-credentials): a document that renames one of the chart's Secrets in its
    values gives it a second name, and is caught."""
    installs = [i for i in documented_installs() if i.release == "agentsaga"]
    assert installs
    readme = next(i for i in installs if i.where.startswith("charts/agentsaga/README.md"))
    names = _secrets(rendered(readme)) | _secrets(rendered(readme, *DEVELOPMENT))
    for install in installs:
        names |= {name for name in _secrets(rendered(install))
                  if not SECRET_NAME.fullmatch(name)}
    return names


def test_every_secret_the_documents_name_is_one_the_chart_uses() -> None:
    real = real_secrets()
    assert {"agentsaga-db-credentials", "agentsaga-postgres-operator",
            "agentsaga-postgres-migrate", "agentsaga-sidecar-access"} <= real, real
    wrong = []
    for path in DOCUMENTS:
        text = path.read_text()
        named = set(SECRET_NAME.findall(text)) | set(CREATED.findall(text))
        for name in sorted(named):
            if name.replace("<release>", "agentsaga") not in real:
                wrong.append(f"{path.relative_to(ROOT)}: {name}")
    assert wrong == [], f"Secrets no documented install uses (the chart's: {sorted(real)})"


def _options(parser: argparse.ArgumentParser, words: list[str]
             ) -> dict[str, list[str]]:
    """flag -> the option strings of its action, for the parser `words` lead to (through
    nested subcommands) and its parents."""
    options: dict[str, list[str]] = {}
    current: argparse.ArgumentParser | None = parser
    remaining = list(words)
    while current is not None:
        for action in current._actions:
            for flag in action.option_strings:
                options[flag] = list(action.option_strings)
        nested = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        current = None
        while remaining and nested:
            word = remaining.pop(0)
            if word in nested[0].choices:
                current = nested[0].choices[word]
                break
    return options


def _invocations() -> list[tuple[str, bool, str, list[str]]]:
    """(where, is the kubectl plugin, subcommand, the words after it) of every command a
    document's code shows."""
    found = []
    for path in DOCUMENTS:
        for match in CODE.finditer(path.read_text()):
            code = (match.group(1) or match.group(2) or "").replace("\\\n", " ")
            for call in INVOCATION.finditer(code):
                found.append((str(path.relative_to(ROOT)), bool(call.group(1)), call.group(2),
                              call.group(3).split()))
    return found


COMMANDS = all_commands()


def _parser(plugin: bool, subcommand: str) -> argparse.ArgumentParser | None:
    if plugin:
        parser = plugin_parser()
    elif subcommand in COMMANDS:
        parser = build_parser(only=subcommand, commands=COMMANDS)
    else:
        return None
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    chosen: argparse.ArgumentParser | None = sub.choices.get(subcommand)
    return chosen


def test_every_flag_the_documents_give_a_command_is_its_own_name() -> None:
    invocations = _invocations()
    assert any(plugin for _, plugin, _, _ in invocations)
    assert {sub for _, plugin, sub, _ in invocations if not plugin} >= {"migrate", "approve"}
    wrong = []
    for where, plugin, subcommand, words in invocations:
        parser = _parser(plugin, subcommand)
        if parser is None:
            continue  # prose such as "the agentsaga command": no subcommand of it
        options = _options(parser, words)
        for word in words:
            flag = word.split("=")[0].rstrip(",.;:)")
            if not re.fullmatch(r"--[a-z][-a-z0-9]*", flag):
                continue
            command = f"{'kubectl ' if plugin else ''}agentsaga {subcommand}"
            if flag not in options:
                wrong.append(f"{where}: `{command} {flag}`: no such flag")
            elif flag != next(o for o in options[flag] if o.startswith("--")):
                wrong.append(f"{where}: `{command} {flag}`: spelled "
                             f"{next(o for o in options[flag] if o.startswith('--'))} elsewhere")
    assert wrong == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(Path(p).relative_to(ROOT)))
def test_a_plan_hash_a_document_shows_is_a_whole_sha256(path: Path) -> None:
    for given in re.findall(r"--plan-hash[ =]([0-9a-f]+)\b", path.read_text()):
        assert len(given) == 64, given


PLAN_HASH_LENGTH = re.compile(
    r"(?:plan|reviewed)[- ]hash[^.\n]{0,80}?\b(\d+)[- ](?:hex|char|digit)", re.I)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(Path(p).relative_to(ROOT)))
def test_a_plan_hash_a_document_describes_is_64_hex_characters(path: Path) -> None:
    """Prose that gives the plan hash's length gives the real one (a SHA-256 in hex)."""
    for length in PLAN_HASH_LENGTH.findall(path.read_text()):
        assert length == "64", f"{path.relative_to(ROOT)}: a plan hash of {length} characters"
