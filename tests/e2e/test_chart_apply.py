"""The chart installed by the real `helm install` into a real API server: the CRDs of the
chart's crds/ first (Helm installs them), then every template, each validated by the server
against its real schema (no `--validate=false`). The Prometheus Operator's PrometheusRule CRD
(tests/crds) is served too, as full-values asks for one."""

from __future__ import annotations

import json

import yaml

from sagatest.chart_tools import CHART, FULL_VALUES
from sagatest.cluster.chart import helm
from sagatest.cluster.kube import Kube

PROMETHEUS_RULE_CRD = (CHART.parents[1] / "tests" / "crds"
                       / "monitoring.coreos.com_prometheusrules.yaml")


def test_the_chart_with_every_value_set_installs(kube: Kube) -> None:
    # ci/full-values.yaml asks for a PrometheusRule: a cluster that runs the Prometheus Operator
    kube.install_crds(PROMETHEUS_RULE_CRD.parent)
    for name in ("agents", "payments", "observability"):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # without hooks: the migration hook's Job needs its database (test_chart_migration.py)
    helm(kube, "install", "saga", str(CHART), "-n", "saga-system", "--create-namespace",
         "-f", str(FULL_VALUES), "--no-hooks")

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
