"""The settings root: every AGENTSAGA_* variable declared once, read once, with clear errors, and
the configuration page's table (docs/configuration.md) generated from it."""

from __future__ import annotations

import argparse
import importlib.util
import re
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from agentsaga.connectors.config import ConnectorConfig
from agentsaga.environment import variables
from agentsaga.errors import ConfigurationError
from agentsaga.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "agentsaga", ROOT / "sidecar", ROOT / "operator"]
DECLARED = {var.name for _, var, _ in variables(Settings)}


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_table",
                                                  ROOT / "tools" / "gen_config_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_page_is_generated_from_the_settings_root() -> None:
    tool = _tool()
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert tool.rewrite(page) == page, "run `python -P tools/gen_config_table.py`"
    for name in DECLARED:
        assert f"`{name}`" in page


def test_the_table_tool_rewrites_a_stale_table() -> None:
    tool = _tool()
    stale = f"intro\n{tool.BEGIN}\n| old | table |\n{tool.END}\noutro\n"
    fresh = tool.rewrite(stale)
    assert "| old | table |" not in fresh
    assert fresh.startswith("intro\n") and fresh.endswith("outro\n")
    assert "| `AGENTSAGA_RECHECK_PAUSE_S` | root | 2 |" in fresh


def test_every_variable_is_declared_once_with_a_description() -> None:
    names = [var.name for _, var, _ in variables(Settings)]
    assert len(names) == len(set(names))
    assert all(name.startswith("AGENTSAGA_") for name in names)
    assert all(var.doc for _, var, _ in variables(Settings))


def test_no_product_module_reads_an_agentsaga_variable_itself() -> None:
    reads = re.compile(r"""(environ|env)\.get\(\s*["']AGENTSAGA_"""
                       r"""|(environ|env)\[\s*["']AGENTSAGA_\w*["']\](?!\s*=)""")
    offenders = [f"{path.relative_to(ROOT)}:{n}"
                 for folder in PRODUCT for path in folder.rglob("*.py")
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if reads.search(line)]
    assert offenders == []


def test_the_chart_sets_only_declared_variables() -> None:
    chart = ROOT / "charts" / "agentsaga"
    text = "".join(p.read_text() for p in [*chart.glob("templates/**/*"), chart / "values.yaml"]
                   if p.is_file())
    used = {re.sub(r"_FILE$", "", name) for name in re.findall(r"AGENTSAGA_[A-Z0-9_]+", text)}
    assert used and used <= DECLARED


def test_defaults_and_values_from_the_environment() -> None:
    assert Settings.from_env({}) == Settings()
    settings = Settings.from_env({
        "AGENTSAGA_RECHECK_PAUSE_S": "0.5", "AGENTSAGA_TOOLS": "a.tools, b.tools,",
        "AGENTSAGA_POOL_MAX": "4", "AGENTSAGA_DATA_DIR": "/d",
        "AGENTSAGA_OUTCOME_COMMIT": "sync", "AGENTSAGA_TRACE_PAYLOADS": "yes",
        "AGENTSAGA_OPERATOR_RESYNC_SECONDS": "3", "AGENTSAGA_CRASH_AT": "x,y",
        "AGENTSAGA_LISTEN": ""})
    assert settings.recheck_pause_s == 0.5 and settings.tools == ("a.tools", "b.tools")
    assert settings.pool_max == 4
    assert settings.data_dir == Path("/d") and settings.outcome_commit == "sync"
    assert settings.telemetry.trace_payloads is True
    assert settings.operator.resync_seconds == 3.0 and settings.debug.crash_at == ("x", "y")
    assert settings.listen == "127.0.0.1:50051"  # empty keeps the default


@pytest.mark.parametrize(("env", "says"), [
    ({"AGENTSAGA_RECHECK_PAUSE_S": "abc"},
     "AGENTSAGA_RECHECK_PAUSE_S must be a number of seconds, got 'abc'"),
    ({"AGENTSAGA_RECHECK_PAUSE_S": "nan"}, "AGENTSAGA_RECHECK_PAUSE_S must be a number"),
    ({"AGENTSAGA_POOL_MIN": "0"}, "AGENTSAGA_POOL_MIN must be a whole number of at least 1, "
     "got '0'"),
    ({"AGENTSAGA_WORKERS": "2.5"}, "AGENTSAGA_WORKERS must be a whole number, got '2.5'"),
    ({"AGENTSAGA_OUTCOME_COMMIT": "maybe"},
     "AGENTSAGA_OUTCOME_COMMIT must be one of sync, async, group, got 'maybe'"),
    ({"AGENTSAGA_TRACE_PAYLOADS": "perhaps"}, "AGENTSAGA_TRACE_PAYLOADS must be true or false"),
    ({"AGENTSAGA_CONNECTOR_TIMEOUT_S": "0"},
     "AGENTSAGA_CONNECTOR_TIMEOUT_S must be a number of seconds above 0, got '0'"),
    ({"AGENTSAGA_OPERATOR_RESYNC_SECONDS": "-1"}, "AGENTSAGA_OPERATOR_RESYNC_SECONDS must be"),
    ({"AGENTSAGA_STRIPE_API_KEY_FILE": "/nonexistent/key"},
     "AGENTSAGA_STRIPE_API_KEY_FILE='/nonexistent/key' cannot be read"),
])
def test_a_bad_value_names_the_variable_and_what_it_must_be(env: dict[str, str],
                                                             says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env(env)
    assert says in str(caught.value)


def test_secret_file_wins_and_secrets_stay_out_of_repr(tmp_path: Path) -> None:
    key = tmp_path / "stripe-key"
    key.write_text("sk_live_from_file\n")
    settings = Settings.from_env({"AGENTSAGA_STRIPE_API_KEY": "sk_live_from_env",
                                  "AGENTSAGA_STRIPE_API_KEY_FILE": str(key),
                                  "AGENTSAGA_DSN": "postgresql://u:hunter2@db/saga"})
    assert settings.connectors.stripe_api_key == "sk_live_from_file"
    assert "sk_live" not in repr(settings) and "hunter2" not in repr(settings)


def test_connector_config_is_derived_from_the_connectors_group() -> None:
    env = {"AGENTSAGA_JIRA_URL": "http://jira.example/", "AGENTSAGA_JIRA_PROJECT": "OPS",
           "AGENTSAGA_CONNECTOR_TIMEOUT_S": "3"}
    config = ConnectorConfig.from_settings(Settings.from_env(env).connectors)
    assert config.jira is not None and config.jira.url == "http://jira.example"
    assert config.http.timeout_s == 3.0 and config.stripe is None
    with pytest.raises(ConfigurationError, match="AGENTSAGA_JIRA_PROJECT is not"):
        ConnectorConfig.from_env({"AGENTSAGA_JIRA_URL": "http://jira.example"})


def test_the_operator_s_configuration_is_the_operator_group_with_its_options_over_it() -> None:
    from agentsaga.operator.main import build_config, configure

    parser = argparse.ArgumentParser()
    configure(parser)
    env = Settings.from_env({"AGENTSAGA_OPERATOR_RESYNC_SECONDS": "3",
                             "AGENTSAGA_DSN": "postgresql://sidecar@db/saga",
                             "AGENTSAGA_OPERATOR_DSN": "postgresql://operator@db/saga"})
    config, dsn = build_config(parser.parse_args(["--full-resync-interval", "60",
                                                  "--webhook-port", "9443"]), env)
    assert config == replace(env.operator, full_resync_seconds=60.0, webhook_port=9443)
    assert config.resync_seconds == 3.0 and dsn == "postgresql://operator@db/saga"
    assert build_config(parser.parse_args([]), Settings())[1] is None  # never the embedded one
    with pytest.raises(ConfigurationError, match="--watch-timeout must be a positive number"):
        build_config(parser.parse_args(["--watch-timeout", "0"]), env)
