"""docs/deploy.md, run as written: every `sh` block, in order, through bash with the real
kubectl and helm (tools/bin) and the kubectl plugin on PATH, against a real control plane with
a real node (`sagatest.cluster.node`) holding the guide's images under the guide's names. The
Secrets' DSNs are filled in as the guide tells its reader to (CHANGE-ME: here, a fresh database
of the test's Postgres, as pods reach it), so the chart's migration hook Job, which `helm
install` waits for, really runs `agentsaga migrate` into it, in the sidecar-refunds image.
Where a real cluster's sidecar and operator would act between two blocks (staging the plan,
recording the decision), the test writes what they write, with the operator's identity.
`console` blocks need Docker: only `docker` commands may hide there, and the commands that write
an image's build context for them (the tests build the images themselves: tools/images.py)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagatest.cluster.control_plane import ADMIN
from sagatest.cluster.kube import KUBECTL, ROOT, Kube
from sagatest.cluster.node_cluster import NodeCluster, node_cluster_running
from sagatest.cluster.pod_images import product_images, refund_sidecar
from sagatest.doc_blocks import blocks, commands
from sagatest.plugin_tools import PLUGIN_DIR

pytestmark = pytest.mark.real_node  # its own node, with the guide's image names

DOC = (ROOT / "docs" / "deploy.md").read_text()
RUN, NAMESPACE = "refund-1182", "support-agents"
# the chart's operator (release agentsaga in agentsaga-system): the one identity the approval
# policy lets write an AgentRun's status
OPERATOR = "--as=system:serviceaccount:agentsaga-system:agentsaga-operator"
# the plan hash the guide shows (a SHA-256, as `kubectl agentsaga plan` prints it)
PLAN_HASH = "0d4938282fe22e19b0a2d1f0e6c3a7b5d4e8f9a1c2b3d4e5f60718293a4b5c6d"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_only_docker_commands_are_left_unrun() -> None:
    kinds = [kind for kind, _ in blocks(DOC)]
    assert kinds.count("sh") >= 8 and "console" in kinds
    for kind, text in blocks(DOC):
        if kind == "console":
            for command in commands(text):
                assert command.startswith(
                    ("docker ", ".venv/bin/python -P tools/images.py context ")), command


def _stage(kube: Kube) -> None:
    """What the operator writes when the agent reaches the pivot."""
    created = kube.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "agentsaga.io/v1alpha1", "kind": "AgentRun",
        "metadata": {"name": RUN, "namespace": NAMESPACE,
                     "annotations": {"agentsaga.io/traceparent": TRACEPARENT}},
        "spec": {"agent": "refund-agent"}}))
    assert created.returncode == 0, created.stderr
    status = {"status": {"phase": "AwaitingApproval", "steps": {"total": 1, "unknown": 0},
                         "pivot": {"state": "AwaitingApproval", "planHash": PLAN_HASH,
                                   "commit": [{"tool": "send_receipt", "class": "irreversible",
                                               "audience": ["customer"],
                                               "args": {"to": "dana@example.com"}}]}}}
    patched = kube.kubectl(OPERATOR, "-n", NAMESPACE, "patch", "agentrun", RUN,
                           "--subresource=status", "--type=merge", "-p", json.dumps(status))
    assert patched.returncode == 0, patched.stderr


def _decide(kube: Kube) -> None:
    """What the operator writes when it accepts the approval (tests/e2e/test_operator_kubectl
    tests that it does)."""
    run = json.loads(kube.kubectl("-n", NAMESPACE, "get", "agentrun", RUN, "-o", "json").stdout)
    approval = run["status"]["approval"]
    status = {"status": {"approval": None, "phase": "Committing",
                         "pivot": {"state": "Approved", "decision": approval["decision"],
                                   "decidedBy": approval["approver"]},
                         "conditions": [{"type": "PivotApproved", "status": "True",
                                         "reason": "Approved", "message": "approved",
                                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    patched = kube.kubectl(OPERATOR, "-n", NAMESPACE, "patch", "agentrun", RUN,
                           "--subresource=status", "--type=merge", "-p", json.dumps(status))
    assert patched.returncode == 0, patched.stderr


def _fill_in_the_dsns(kube: Kube, dsn: str) -> None:
    """What the guide's reader does with its CHANGE-MEs: the real database and passwords (here
    the test's database, each role's DSN as the guide names the role)."""
    for namespace, secret in (("agentsaga-system", "agentsaga-postgres-operator"),
                              ("agentsaga-system", "agentsaga-postgres-migrate")):
        found = kube.get("v1", "secrets", namespace, secret)
        assert found is not None, f"the guide did not create {namespace}/{secret}"
        written = conninfo_to_dict(base64.b64decode(found["data"]["dsn"]).decode())
        assert str(written["password"]).startswith("CHANGE-ME"), written
        real = dict(conninfo_to_dict(dsn))
        if written["user"] != "agentsaga_owner":  # the migration role is the database's owner
            real["user"] = written["user"]
        value = make_conninfo(**real)  # type: ignore[arg-type]
        kube.patch("v1", "secrets", namespace, secret,
                   {"data": {"dsn": base64.b64encode(value.encode()).decode()}})


@pytest.fixture
def cluster() -> Iterator[NodeCluster]:
    """A control plane with a real node that holds the images under the names the guide pushes
    them as (no registry: imported into the node's containerd)."""
    images = product_images()
    with node_cluster_running() as running:
        running.node.load_image(refund_sidecar(images["sidecar"]).archive,
                                "registry.example.com/agentsaga/sidecar-refunds:0.1.0")
        running.node.load_image(images["operator"].archive,
                                "registry.example.com/agentsaga/operator:0.1.0")
        yield running


def test_every_sh_block_of_the_deploy_guide_runs(cluster: NodeCluster, pg_empty: str) -> None:
    kube = cluster.kube
    env = kube.env()
    env["PATH"] = os.pathsep.join([str(KUBECTL.parent), str(PLUGIN_DIR), env["PATH"]])
    outputs = []
    for kind, text in blocks(DOC):
        if kind != "sh":
            continue
        if "kubectl agentsaga runs" in text:
            _stage(kube)
        if "--for=condition=PivotApproved" in text:
            _decide(kube)
        if "helm install" in text:
            _fill_in_the_dsns(kube, cluster.dsn_for_pods(pg_empty))
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (f"{text}\n---\n{done.stdout}\n{done.stderr}\n"
                                      f"{cluster.node.pod_logs()}")
        outputs.append(done.stdout)

    # the chart's migration hook ran `agentsaga migrate` into the database (a Job, a pod on
    # the node, in the image): the saga log's tables and the roles the guide's DSNs name exist
    with psycopg.connect(pg_empty) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'saga_%'")}
        # and the agent namespace's own credentials, with the passwords of its Secret
        provisioned = {str(r[0]): bool(r[1]) for r in conn.execute(
            "SELECT c.role_name, a.rolpassword IS NOT NULL FROM agentsaga_credentials c"
            " JOIN pg_authid a ON a.rolname = c.role_name WHERE c.namespace = %s",
            (NAMESPACE,))}
    assert {"saga_runs", "saga_log"} <= tables, tables
    assert provisioned == {"agentsaga_ns_support_agents": True,
                           "agentsaga_job_support_agents": True}
    found = kube.get("v1", "secrets", NAMESPACE, "agentsaga-db-credentials")
    assert found is not None
    assert base64.b64decode(found["data"]["sidecar-user"]).decode() == (
        "agentsaga_ns_support_agents")
    # the operator's namespace holds no sidecar credential
    assert kube.get("v1", "secrets", "agentsaga-system", "agentsaga-postgres") is None
    operator = json.loads(kube.kubectl("-n", "agentsaga-system", "get", "deployment",
                                       "agentsaga-operator", "-o", "json").stdout)
    assert operator["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.example.com/agentsaga/operator:0.1.0")
    template = json.loads(kube.kubectl("-n", "agentsaga-system", "get", "configmap",
                                       "agentsaga-sidecar-template", "-o", "json").stdout)
    sidecar = json.loads(template["data"]["sidecar.json"])["container"]
    assert sidecar["image"] == "registry.example.com/agentsaga/sidecar-refunds:0.1.0"
    assert {"name": "AGENTSAGA_TOOLS", "value": "refund_tools,agentsaga.connectors.tools"} in (
        sidecar["env"])
    agent = json.loads(kube.kubectl("-n", NAMESPACE, "get", "deployment", "refund-agent", "-o",
                                    "json").stdout)
    assert agent["spec"]["template"]["metadata"]["labels"]["agentsaga.io/inject"] == "true"
    binding = json.loads(kube.kubectl("-n", NAMESPACE, "get", "rolebinding", "alice-approves",
                                      "-o", "json").stdout)
    assert binding["roleRef"]["name"] == "agentsaga-approver"
    assert binding["subjects"][0]["name"] == "alice"
    joined = "\n".join(outputs)
    assert f"plan hash {PLAN_HASH}" in joined
    # the plugin approves as the user `kubectl auth whoami` reports: the kubeconfig's admin
    assert f"plan {PLAN_HASH} Approved by {ADMIN}" in joined
    assert "trace id: 4bf92f3577b34da6a3ce929d0e0e4736" in joined
    run = json.loads(kube.kubectl("-n", NAMESPACE, "get", "agentrun", RUN, "-o", "json").stdout)
    assert run["status"]["pivot"]["decidedBy"] == "alice"  # the by-hand patch came last
