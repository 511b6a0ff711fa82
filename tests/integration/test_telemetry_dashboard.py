"""The Grafana dashboard shipped in the chart is the one tools/dashboard.py generates from
`sagatest.dashboard`, and it queries every metric the code declares under the name the
OpenTelemetry Prometheus exporter gives it. (What each query returns is checked against a real
Prometheus in tests/e2e/test_dashboard_prometheus.py.)"""

from __future__ import annotations

import json

from sagatest.dashboard import DASHBOARD, PANELS, render
from sagatest.exported_metrics import exported_names, queried_series


def test_the_chart_carries_the_generated_dashboard() -> None:
    assert DASHBOARD.read_text() == render(), "run `python -P tools/dashboard.py`"
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "agentsaga"
    assert [p["title"] for p in dashboard["panels"]] == [p.title for p in PANELS]
    assert len({p.title for p in PANELS}) == len(PANELS), "two panels share a title"
    [link] = dashboard["links"]
    assert "agentsaga.run_id" in link["url"] and "${run_id}" in link["url"]


def test_every_declared_metric_is_on_the_dashboard_under_its_exported_name() -> None:
    exported = exported_names()
    queried = {s for p in PANELS for query in p.queries for s in queried_series(query.expr)}
    missing = {name for name, series in exported.items() if not series & queried}
    assert not missing, f"declared but on no panel (or under another name): {sorted(missing)}"
    every = set().union(*exported.values())
    assert queried <= every, f"queried but never exported: {sorted(queried - every)}"
