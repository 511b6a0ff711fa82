"""The rendered chart applied with the real kubectl 1.37 to the Kubernetes API stand-in: the CRDs of
the chart's crds/ first (as Helm installs them), then every template. Built-in kinds are applied
with --validate=false: the stand-in serves OpenAPI only for its custom resources, and those kinds
are validated strictly by kubernetes-validate in tests/integration/test_chart_helm.py. The
Prometheus Operator's PrometheusRule CRD (tests/crds) is served too, as full-values asks for one."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from sagatest.chart_tools import CHART, FULL_VALUES, helm
from sagatest.kube_fixtures import Kube, kube  # noqa: F401  (fixture)

PROMETHEUS_RULE_CRD = (CHART.parents[1] / "tests" / "crds"
                       / "monitoring.coreos.com_prometheusrules.yaml")


def test_rendered_chart_applies_to_the_api(kube: Kube, tmp_path: Path) -> None:  # noqa: F811
    # ci/full-values.yaml asks for a PrometheusRule: a cluster that runs the Prometheus Operator
    for crd in [*sorted((CHART / "crds").glob("*.yaml")), PROMETHEUS_RULE_CRD]:
        result = kube.kubectl("apply", "-f", str(crd))
        assert result.returncode == 0, result.stderr
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        for name in ("saga-system", "agents", "payments", "observability")
    ]
    created = kube.kubectl(
        "apply",
        "--validate=false",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": namespaces}),
    )
    assert created.returncode == 0, created.stderr

    manifests = tmp_path / "chart.yaml"
    manifests.write_text(
        helm("template", "saga", str(CHART), "-n", "saga-system", "-f", str(FULL_VALUES)).stdout
    )
    result = kube.kubectl("apply", "--validate=false", "-f", str(manifests))
    assert result.returncode == 0, result.stderr

    deployment = json.loads(
        kube.kubectl(
            "get",
            "deployment",
            "agentsaga-full-operator",
            "-n",
            "saga-system",
            "-o",
            "json",
            check=True,
        ).stdout
    )
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "saga-operator"
    for namespace in ("agents", "payments"):
        role = json.loads(
            kube.kubectl(
                "get", "role", "agentsaga-full-operator-jobs", "-n", namespace, "-o", "json",
                check=True,
            ).stdout
        )
        assert role["rules"] == [{"apiGroups": ["batch"], "resources": ["jobs"],
                                  "verbs": ["create"]}]
        peering = kube.kubectl(
            "get",
            "kopfpeerings.kopf.dev",
            "agentsaga-full",
            "-n",
            namespace,
            "-o",
            "name",
            check=True,
        )
        assert peering.stdout.strip() == "kopfpeering.kopf.dev/agentsaga-full"
    policy = json.loads(
        kube.kubectl(
            "get", "validatingadmissionpolicy", "agentsaga-full-approval", "-o", "json", check=True
        ).stdout
    )
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == [
        "agentruns/status"
    ]
    webhook = json.loads(
        kube.kubectl(
            "get",
            "mutatingwebhookconfiguration",
            "agentsaga-full-webhook",
            "-o",
            "json",
            check=True,
        ).stdout
    )
    assert webhook["webhooks"][0]["clientConfig"]["service"]["path"] == "/inject-sidecar"

    alerts = json.loads(kube.kubectl("get", "prometheusrule", "agentsaga-full-alerts", "-n",
                                     "saga-system", "-o", "json", check=True).stdout)
    assert len(alerts["spec"]["groups"][0]["rules"]) == 8

    # the worked example's AgentRun is accepted against the CRD the chart installed
    run = yaml.safe_load((CHART / "examples" / "agentrun.yaml").read_text())
    run["metadata"]["namespace"] = "agents"
    result = kube.kubectl("apply", "-f", "-", input=json.dumps(run))
    assert result.returncode == 0, result.stderr
    listed = kube.kubectl("get", "agentruns", "-n", "agents", "-o", "name", check=True)
    assert listed.stdout.strip() == "agentrun.agentsaga.io/refund-1182"
