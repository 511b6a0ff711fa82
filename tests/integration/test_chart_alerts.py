"""The chart's alerting rules: a PrometheusRule (valid against the Prometheus Operator's CRD) when
the cluster serves monitoring.coreos.com/v1, else a ConfigMap with the same rules file; every rule
passes `promtool check rules` and its `promtool test rules` cases (tests/alerts/), one silent and
one firing per alert; every rule reads metrics the code exports and tells on-call what to run."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sagatest.chart_tools import (
    FULL_VALUES,
    crd_schema,
    find,
    one,
    render,
    validate_custom_resource,
)
from sagatest.exported_metrics import exported_names, queried_series
from sagatest.prometheus_fixtures import PROMTOOL

ROOT = Path(__file__).resolve().parents[2]
UNIT_TESTS = ROOT / "tests" / "alerts" / "agentsaga.rules.test.yaml"
PROMETHEUS_RULE_CRD = ROOT / "tests" / "crds" / "monitoring.coreos.com_prometheusrules.yaml"
OPERATOR_API = ("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
ALERTS = {"AgentsagaStepOutcomeUnknown", "AgentsagaWaitingForHuman",
          "AgentsagaPivotAwaitingApproval", "AgentsagaCardAuthorisationExpiring",
          "AgentsagaIrreversibleBeforePivot", "AgentsagaOrphanNotUnwound",
          "AgentsagaSagaLogUnreachable", "AgentsagaOperatorNotResyncing"}


def rules_file(*args: str) -> str:
    maps = [d for d in find(render(*args), "ConfigMap")
            if "agentsaga.rules.yaml" in (d.get("data") or {})]
    assert len(maps) == 1, f"expected one rules ConfigMap, got {len(maps)}"
    text: str = maps[0]["data"]["agentsaga.rules.yaml"]
    return text


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not PROMTOOL.exists():
        raise FileNotFoundError(f"{PROMTOOL} is missing: run `make test-tools`")
    return subprocess.run([str(PROMTOOL), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def rules(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in groups["groups"] for rule in group["rules"]]


def test_without_the_prometheus_operator_a_rules_configmap_passes_promtool(
        tmp_path: Path) -> None:
    docs = render()
    assert find(docs, "PrometheusRule") == []
    (tmp_path / "agentsaga.rules.yaml").write_text(rules_file())
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    checked = promtool("check", "rules", "agentsaga.rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout
    tested = promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_silent_and_a_firing_unit_test() -> None:
    shipped = {rule["alert"] for rule in rules(yaml.safe_load(rules_file()))}
    assert shipped == ALERTS
    cases = [case for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
             for case in test["alert_rule_test"]]
    for alert in ALERTS:
        mine = [case for case in cases if case["alertname"] == alert]
        assert any(not case["exp_alerts"] for case in mine), f"{alert}: no silent case"
        assert any(case["exp_alerts"] for case in mine), f"{alert}: no firing case"


def test_every_rule_reads_exported_metrics_and_names_a_command() -> None:
    exported = set().union(*exported_names().values())
    for rule in rules(yaml.safe_load(rules_file())):
        read = queried_series(rule["expr"])
        assert read and read <= exported, (rule["alert"], read - exported)
        summary = rule["annotations"]["summary"]
        assert re.search(r"\b(agentsaga|kubectl) [a-z]", summary), rule["alert"]


def test_with_the_prometheus_operator_a_valid_prometheusrule_carries_the_same_rules(
        tmp_path: Path) -> None:
    docs = render(*OPERATOR_API)
    rule = one(docs, "PrometheusRule")
    validate_custom_resource(rule, crd_schema(PROMETHEUS_RULE_CRD))
    assert not [d for d in find(docs, "ConfigMap")
                if "agentsaga.rules.yaml" in (d.get("data") or {})]
    assert rule["spec"] == yaml.safe_load(rules_file())
    bad = {**rule, "spec": {"groups": [{"name": "x", "rules": [{"alert": "A", "for": "5 min",
                                                                "expr": "up"}]}]}}
    try:
        validate_custom_resource(bad, crd_schema(PROMETHEUS_RULE_CRD))
    except jsonschema.ValidationError as exc:
        assert "5 min" in str(exc)
    else:
        raise AssertionError("the CRD schema accepted a malformed duration")


def test_full_values_render_per_tool_windows_that_promtool_accepts(tmp_path: Path) -> None:
    rule = one(render("-f", str(FULL_VALUES)), "PrometheusRule")  # format: PrometheusRule
    validate_custom_resource(rule, crd_schema(PROMETHEUS_RULE_CRD))
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    unknown = next(r for r in rules(rule["spec"]) if r["alert"] == "AgentsagaStepOutcomeUnknown")
    assert unknown["labels"] == {"severity": "warning", "team": "payments"}
    expr = unknown["expr"]
    assert 'agentsaga_tool!~"charge_card|send_email"}) > 960' in expr  # 900 + 60
    assert 'agentsaga_tool="charge_card"}) > 180' in expr
    assert 'agentsaga_tool="send_email"}) > 3660' in expr
    orphan = next(r for r in rules(rule["spec"]) if r["alert"] == "AgentsagaOrphanNotUnwound")
    assert orphan["expr"].endswith("> 1020")  # the Job's deadline (900) + the margin (120)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_alerts_can_be_forced_to_a_configmap_or_turned_off() -> None:
    forced = render(*OPERATOR_API, "--set", "alerts.format=ConfigMap")
    assert find(forced, "PrometheusRule") == [] and rules_file(*OPERATOR_API, "--set",
                                                               "alerts.format=ConfigMap")
    off = render(*OPERATOR_API, "--set", "alerts.enabled=false")
    assert find(off, "PrometheusRule") == []
    assert not [d for d in find(off, "ConfigMap") if "agentsaga.rules.yaml" in (d.get("data")
                                                                                 or {})]
