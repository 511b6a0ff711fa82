"""The defaults a platform team reviews, as the real helm renders them: a PodDisruptionBudget
behind the fail-closed webhook (none for one replica, which it would pin to its node), the
operator's readiness probe, and the requests and limits values.yaml gives with their figures."""

from __future__ import annotations

import yaml

from sagatest.chart_tools import CHART, find, one, render


def test_the_operator_replicas_keep_one_up_through_a_drain() -> None:
    docs = render()
    budget = one(docs, "PodDisruptionBudget")
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert budget["spec"]["minAvailable"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert one(docs, "MutatingWebhookConfiguration")["webhooks"][0]["failurePolicy"] == "Fail"
    assert not find(render("--set", "operator.replicas=1"), "PodDisruptionBudget")
    assert not find(render("--set", "operator.podDisruptionBudget.enabled=false"),
                    "PodDisruptionBudget")


def test_the_operator_is_ready_only_once_its_webhook_listens() -> None:
    container = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["tcpSocket"] == {"port": "webhook"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_requests_and_limits_are_the_measured_ones() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    text = (CHART / "values.yaml").read_text()
    assert "idle 165.9 MiB" in text and "idle 68.7 MiB" in text  # the figures they come from
    container = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == values["operator"]["resources"]
    assert values["operator"]["resources"]["requests"]["memory"] == "192Mi"
    assert values["sidecar"]["resources"]["requests"]["memory"] == "128Mi"
