"""helm lint --strict, helm template and validation of every rendered manifest: built-in kinds
with kubernetes-validate (1.37, strict), custom resources with jsonschema against their CRD's
openAPIV3Schema; values.schema.json rejects bad values naming the field."""

from __future__ import annotations

import argparse
import base64
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agentsaga.connectors.mcp import declarations
from agentsaga.operator.approval_trust import selects
from agentsaga.settings import Settings
from sagatest.chart_tools import (
    CHART,
    CREDENTIALS,
    EXAMPLE_VALUES,
    FULL_VALUES,
    IMAGES,
    MINIMAL_VALUES,
    crd_schema,
    find,
    helm,
    one,
    render,
    sidecar_template,
    validate_custom_resource,
    with_setup_job,
)

CR_SCHEMAS = {
    ("agentsaga.io/v1alpha1", "AgentRun"): CHART / "crds" / "agentruns.agentsaga.io.yaml",
    # the Prometheus Operator's CRD, kept in the tests only (its source is in its header)
    ("monitoring.coreos.com/v1", "PrometheusRule"):
        CHART.parents[1] / "tests" / "crds" / "monitoring.coreos.com_prometheusrules.yaml",
}
VALUE_SETS = {
    "minimal": ["-f", str(MINIMAL_VALUES)],
    "full": ["-f", str(FULL_VALUES)],
    "example": ["-f", str(EXAMPLE_VALUES)],
}


def _peering_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for crd in yaml.safe_load_all((CHART / "crds" / "kopfpeerings.kopf.dev.yaml").read_text()):
        version = crd["spec"]["versions"][0]
        key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
        out[key] = version["schema"]["openAPIV3Schema"]
    return out


def validate(doc: dict[str, Any]) -> None:
    key = (doc["apiVersion"], doc["kind"])
    schemas = {k: crd_schema(p) for k, p in CR_SCHEMAS.items()} | _peering_schemas()
    if key in schemas:
        validate_custom_resource(doc, schemas[key])
    else:
        kubernetes_validate.validate(doc, "1.37.0", strict=True)


@pytest.mark.parametrize("values", VALUE_SETS)
def test_helm_lint_strict_passes(values: str) -> None:
    result = helm("lint", "--strict", str(CHART), *VALUE_SETS[values])
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("values", VALUE_SETS)
def test_every_rendered_manifest_validates(values: str) -> None:
    docs = render(*VALUE_SETS[values])
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "ClusterRole",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
    } <= kinds
    for doc in docs:
        validate(doc)
        labels = doc["metadata"]["labels"]
        assert labels["helm.sh/chart"] == "agentsaga-0.1.0"
        for key in ("name", "instance", "version", "managed-by"):
            assert f"app.kubernetes.io/{key}" in labels, (doc["kind"], key)


def test_crds_and_example_custom_resources_validate() -> None:
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(crd, "1.37.0", strict=True)
    run = yaml.safe_load((CHART / "examples" / "agentrun.yaml").read_text())
    validate(run)
    deployment = yaml.safe_load((CHART / "examples" / "agent-deployment.yaml").read_text())
    validate(deployment)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["agentsaga.io/inject"] == "true"
    bad = dict(run, spec={**run["spec"], "onOrphan": "explode"})
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


@pytest.mark.parametrize(
    ("flag", "field"),
    [
        ("sidecar.probe.type=http", "/sidecar/probe/type"),
        ("injection.failurePolicy=Maybe", "/injection/failurePolicy"),
        ("operator.replicas=0", "/operator/replicas"),
        ("postgres.dsn=postgresql://u:p@db/saga", "/postgres"),
        ("sidecar.tools[0]=not a module", "/sidecar/tools/0"),
        ("otel.protocol=udp", "/otel/protocol"),
    ],
)
def test_values_schema_rejects_bad_values_naming_the_field(flag: str, field: str) -> None:
    result = helm("template", "x", str(CHART), "--set", flag, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert f"at '{field}'" in result.stderr, result.stderr


def test_values_schema_closes_every_object() -> None:
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())

    def walk(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            assert node.get("additionalProperties") is False, path
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}")

    walk(schema, "")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    full = yaml.safe_load(FULL_VALUES.read_text())

    def keys(node: Any, prefix: str = "") -> set[str]:
        if not isinstance(node, dict) or not node:
            return {prefix}
        out = set()
        for key, child in node.items():
            if prefix.endswith(
                (
                    "resources",
                    "Annotations",
                    "Labels",
                    "annotations",
                    "nodeSelector",
                    "resourceAttributes",
                    "affinity",
                    "matchLabels",
                )
            ):
                return {prefix}
            out |= keys(child, f"{prefix}.{key}" if prefix else key)
        return out

    # ci/full-values.yaml sets every value that values.yaml declares
    full_keys = keys(full)
    unset = {k for k in keys(values) if not any(f == k or f.startswith(k + ".") for f in full_keys)}
    assert unset == set()


def test_operator_deployment_is_hardened_and_configured() -> None:
    docs = render("-f", str(FULL_VALUES))
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["allowPrivilegeEscalation"] is False
    assert container["args"][:6] == [
        "operator",
        "--namespace=agents",
        "--namespace=payments",
        "--peering=agentsaga-full",
        "--liveness=http://0.0.0.0:8081/healthz",
        "--webhook-port=8443",
    ]
    assert "--webhook-cert-dir=/etc/agentsaga/webhook-tls" in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    env = {e["name"]: e for e in container["env"]}
    # the operator holds its own credential, never the sidecar's (test_the_operator_holds_...)
    assert "AGENTSAGA_DSN" not in env
    assert env["AGENTSAGA_SIDECAR_IMAGE"]["value"] == (
        "registry.example.com/agentsaga/sidecar:0.1.0-rc1"
    )
    assert env["AGENTSAGA_JOB_SERVICE_ACCOUNT"]["value"] == "saga-agent"
    assert env["AGENTSAGA_JOB_DEADLINE_SECONDS"]["value"] == "900"
    assert env["AGENTSAGA_SIDECAR_TEMPLATE"]["value"] == "/etc/agentsaga/sidecar/sidecar.json"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == (
        "http://otel-collector.observability.svc:4318"
    )
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "http/protobuf"
    assert env["OTEL_SERVICE_NAME"]["value"] == "saga-operator"
    assert env["OTEL_TRACES_SAMPLER"]["value"] == "parentbased_traceidratio"
    assert "deployment.environment=staging" in env["OTEL_RESOURCE_ATTRIBUTES"]["value"]
    # a DSN is only ever a reference; the one location values may hold
    # (postgres.credentials.location) names no user and no password
    rendered = yaml.safe_dump_all(docs)
    assert set(re.findall(r"postgres(?:ql)?://[^\s\"'\\]*", rendered)) == {
        "postgresql://postgres.databases.svc:5432/agentsaga?sslmode=require"}
    assert not re.search(r"postgres(?:ql)?://[^\s\"'@]*@", rendered)


def _rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_is_least_privilege() -> None:
    docs = render()
    operator = _rules(one(docs, "ClusterRole", "saga-agentsaga-operator"))
    # no `update` (kopf and the operator only patch), no `delete jobs` (ttlSecondsAfterFinished),
    # and Jobs are created only through the Role in each sidecar namespace; `create agentruns`:
    # the operator creates the AgentRun of a run it learns of from the saga log
    assert operator == {
        *{("agentsaga.io", "agentruns", v) for v in ("get", "list", "watch", "create", "patch")},
        *{("agentsaga.io", "agentruns/status", v) for v in ("get", "patch")},
        ("agentsaga.io", "agentruns/finalizers", "update"),
        *{("", "pods", v) for v in ("get", "list", "watch")},
        *{("batch", "jobs", v) for v in ("get", "list", "watch")},
        ("", "events", "create"),
        ("", "events", "patch"),
        *{("kopf.dev", "kopfpeerings", v) for v in ("get", "list", "watch", "patch")},
    }
    # by default the operator watches the chart's namespaces only (here the release's, also
    # its agent namespace): a RoleBinding there, a KopfPeering, `--namespace` flags
    assert [b["metadata"]["namespace"] for b in find(docs, "RoleBinding",
                                                     "saga-agentsaga-operator")] == [
        "agentsaga-system"]
    assert not find(docs, "ClusterRoleBinding", "saga-agentsaga-operator")
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=agentsaga-system" in args and "--all-namespaces" not in args
    cluster = _rules(one(docs, "ClusterRole", "saga-agentsaga-operator-cluster"))
    assert ("kopf.dev", "clusterkopfpeerings", "patch") not in cluster
    assert all(verb in ("get", "list", "watch", "patch") for _, _, verb in cluster)
    # every namespace only when asked: cluster-wide binding and peering
    everywhere = render("--set", "operator.watchAllNamespaces=true")
    assert ("kopf.dev", "clusterkopfpeerings", "patch") in _rules(
        one(everywhere, "ClusterRole", "saga-agentsaga-operator-cluster"))
    assert one(everywhere, "ClusterRoleBinding", "saga-agentsaga-operator")
    assert one(everywhere, "ClusterKopfPeering")
    assert "--all-namespaces" in one(everywhere, "Deployment")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    # the setup hook Job reads only the Secrets it makes, and updates only the CRDs of crds/
    setup = one(docs, "Role", "saga-agentsaga-setup")
    assert {tuple(r["verbs"]): r.get("resourceNames") for r in setup["rules"]} == {
        ("create",): None,
        ("get", "patch"): ["saga-agentsaga-sidecar-access", "saga-agentsaga-db-credentials",
                   "saga-agentsaga-webhook-tls", "saga-agentsaga-db-credentials-migrate"],
        ("update",): ["saga-agentsaga-db-credentials-migrate"]}
    crd_rules = one(docs, "ClusterRole", "saga-agentsaga-setup")["rules"]
    assert {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
            "resourceNames": ["agentruns.agentsaga.io", "clusterkopfpeerings.kopf.dev",
                              "kopfpeerings.kopf.dev"], "verbs": ["get", "update"]} in crd_rules
    assert ("admissionregistration.k8s.io", "validatingadmissionpolicybindings", "list") in cluster
    jobs = one(docs, "Role", "saga-agentsaga-operator-jobs")
    assert _rules(jobs) == {("batch", "jobs", "create")}
    assert jobs["metadata"]["namespace"] == "agentsaga-system"
    binding = one(docs, "RoleBinding", "saga-agentsaga-operator-jobs")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "saga-agentsaga-operator",
                                    "namespace": "agentsaga-system"}]
    full_jobs = find(render("-f", str(FULL_VALUES)), "Role", "agentsaga-full-operator-jobs")
    assert sorted(r["metadata"]["namespace"] for r in full_jobs) == ["agents", "payments"]
    # nothing of this chart is bound to the agents' ServiceAccount, which mounts no token
    for doc in docs:
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert all(s["name"] != "agentsaga-sidecar" for s in doc["subjects"]), doc
    account = one(docs, "ServiceAccount", "agentsaga-sidecar")
    assert account["automountServiceAccountToken"] is False
    approver = _rules(one(docs, "ClusterRole", "agentsaga-approver"))
    assert approver == {
        *{("agentsaga.io", "agentruns", v) for v in ("get", "list", "watch", "approve")},
        ("agentsaga.io", "agentruns/status", "get"),
        ("agentsaga.io", "agentruns/status", "patch"),
    }
    # namespaced watching binds the same rules per namespace and uses KopfPeering objects
    full = render("-f", str(FULL_VALUES))
    bindings = find(full, "RoleBinding", "agentsaga-full-operator")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["agents", "payments"]
    assert not find(full, "ClusterRoleBinding", "agentsaga-full-operator")
    assert sorted(p["metadata"]["namespace"] for p in find(full, "KopfPeering")) == [
        "agents",
        "payments",
    ]
    assert ("kopf.dev", "kopfpeerings", "patch") in _rules(
        one(full, "ClusterRole", "agentsaga-full-operator")
    )


def test_webhook_configuration_matches_its_certificate_and_service() -> None:
    docs = render()
    assert not find(docs, "Secret")  # nothing random at render time: the setup Job makes them
    (secret,) = [d for d in find(with_setup_job(docs), "Secret")
                 if d["metadata"]["name"] == "saga-agentsaga-webhook-tls"]
    assert secret["type"] == "kubernetes.io/tls"
    webhook = one(docs, "MutatingWebhookConfiguration")["webhooks"][0]
    # no caBundle rendered: the operator sets it at start from the Secret the setup Job made
    assert "caBundle" not in webhook["clientConfig"]
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--webhook-configuration=saga-agentsaga-webhook" in container["args"]
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": "saga-agentsaga-webhook-tls"}} in \
        volumes
    assert webhook["clientConfig"]["service"] == {
        "name": "saga-agentsaga-webhook",
        "namespace": "agentsaga-system",
        "path": "/inject-sidecar",
        "port": 443,
    }
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["reinvocationPolicy"] == "Never"
    assert webhook["rules"][0]["operations"] == ["CREATE"]
    # the API server calls the webhook for opted-in pods only, in the agent namespaces
    assert webhook["objectSelector"]["matchLabels"] == {"agentsaga.io/inject": "true"}
    assert webhook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["agentsaga-system"]},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["kube-system", "kube-public", "kube-node-lease"]},
    ]
    # the operator may patch that one configuration (its caBundle), no other
    rules = one(docs, "ClusterRole", "saga-agentsaga-operator-cluster")["rules"]
    assert {"apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": ["saga-agentsaga-webhook"], "verbs": ["get", "patch"]} in rules
    managed = render("--set", "injection.certificate.certManager.enabled=true",
                     "--set", "injection.certificate.certManager.issuerRef.name=internal-ca",
                     "--set", "injection.certificate.certManager.issuerRef.kind=ClusterIssuer")
    certificate = one(managed, "Certificate")
    assert certificate["spec"]["secretName"] == "saga-agentsaga-webhook-tls"
    assert "saga-agentsaga-webhook-tls" not in {
        d["metadata"]["name"] for d in find(with_setup_job(managed), "Secret")}
    configuration = one(managed, "MutatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "agentsaga-system/saga-agentsaga-webhook"}
    assert "caBundle" not in configuration["webhooks"][0]["clientConfig"]
    managed_args = one(managed, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in managed_args if a.startswith("--webhook-configuration")]
    assert {"key": "app.kubernetes.io/part-of", "operator": "NotIn", "values": ["agentsaga"]} in (
        webhook["objectSelector"]["matchExpressions"]
    )
    cert = base64.b64decode(secret["data"]["tls.crt"]).decode()
    assert cert.startswith("-----BEGIN CERTIFICATE-----")
    service = one(docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    full = render("-f", str(FULL_VALUES))
    assert one(full, "MutatingWebhookConfiguration")["webhooks"][0]["failurePolicy"] == "Fail"
    off = render("--set", "injection.enabled=false")
    assert not find(off, "MutatingWebhookConfiguration")
    assert sorted(d["metadata"]["name"] for d in find(with_setup_job(off), "Secret")) == [
        "saga-agentsaga-db-credentials", "saga-agentsaga-db-credentials-migrate",
        "saga-agentsaga-sidecar-access"]


def injected_namespaces(*args: str) -> set[str]:
    """Of a few namespaces, those whose pods the rendered webhook is called for (its
    namespaceSelector against each namespace's kubernetes.io/metadata.name label)."""
    webhook = one(render(*args), "MutatingWebhookConfiguration")["webhooks"][0]
    candidates = ("agentsaga-system", "support-agents", "billing", "default", "kube-system",
                  "kube-public", "kube-node-lease")
    return {name for name in candidates
            if selects(webhook["namespaceSelector"], {"kubernetes.io/metadata.name": name})}


def test_webhook_injects_in_every_agent_namespace_and_no_system_namespace() -> None:
    # default: the release namespace is the agent namespace
    assert injected_namespaces() == {"agentsaga-system"}
    # the two-namespace install of docs/deploy.md: never in the release namespace
    assert injected_namespaces("--set", "sidecar.namespaces={support-agents}") == {
        "support-agents"}
    assert injected_namespaces("--set", "sidecar.namespaces={support-agents,billing}") == {
        "support-agents", "billing"}
    assert injected_namespaces(
        "--set", "sidecar.namespaces={support-agents,agentsaga-system}") == {
        "support-agents", "agentsaga-system"}
    # a selector of your own replaces the agent namespaces, never the exclusions
    everywhere = ["--set", "injection.namespaceSelector.matchExpressions[0].key=team",
                  "--set", "injection.namespaceSelector.matchExpressions[0].operator=DoesNotExist"]
    assert injected_namespaces(*everywhere) == {
        "agentsaga-system", "support-agents", "billing", "default"}
    assert injected_namespaces("--set", "sidecar.namespaces={support-agents}", *everywhere) == {
        "support-agents", "billing", "default"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "sidecar.namespaces={support-agents,kube-system}"],
         "sidecar.namespaces names kube-system, a system namespace"),
        (["--set", "sidecar.namespaces={kube-node-lease}"],
         "sidecar.namespaces names kube-node-lease, a system namespace"),
        (["--namespace", "kube-public"],
         "sidecar.namespaces is empty, so agent pods would run in the release namespace "
         "kube-public, a system namespace"),
    ],
    ids=["kube-system", "kube-node-lease", "release-namespace"],
)
def test_a_system_namespace_for_agents_is_refused(flags: list[str], message: str) -> None:
    result = helm("template", "x", str(CHART), "-f", str(MINIMAL_VALUES), *flags, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "sidecar.namespaces to the namespaces of your agent pods" in result.stderr
    off = helm("template", "x", str(CHART), "-f", str(MINIMAL_VALUES), *flags,
               "--set", "injection.enabled=false", check=False)
    assert off.returncode != 0 and message in off.stderr


def test_an_injected_sidecar_without_tools_is_refused() -> None:
    bare = helm("template", "x", str(CHART), *IMAGES, check=False)
    assert bare.returncode != 0
    assert "the injected sidecar would have no tools and exit at start" in bare.stderr
    for what in ("connectors.stripe.apiKeySecret.name", "sidecar.mcp.upstreams", "sidecar.tools"):
        assert what in bare.stderr, what
    # the connectors ConfigMap's settings alone (no key, no URL) configure no connector either
    assert helm("template", "x", str(CHART), "--set", "connectors.stripe.apiBase=https://s.example",
                "--set", "connectors.jira.email=a@example.com", check=False).returncode != 0


@pytest.mark.parametrize("image", ["operator", "sidecar"])
def test_a_missing_image_is_refused_naming_how_to_build_it(image: str) -> None:
    """No image is published: without its repository the chart renders nothing (an install
    would only fail to pull), and the message says where the image comes from."""
    given = [arg for setting in zip(IMAGES[::2], IMAGES[1::2], strict=True)
             if not setting[1].startswith(f"{image}.") for arg in setting]
    for values in (list(CREDENTIALS),
                   ["-f", str(MINIMAL_VALUES), "--set", f"{image}.image.repository="]):
        result = helm("template", "x", str(CHART), "--set",
                      "connectors.stripe.apiKeySecret.name=stripe-credentials", *given, *values,
                      check=False)
        assert result.returncode != 0
        assert f"{image}.image.repository is required: no agentsaga image is published" in (
            result.stderr), result.stderr
        assert f"images/{image}.Dockerfile" in result.stderr
        context = f"python -P tools/images.py context {image} build/{image}"
        build = (f"docker build --network none -f images/{image}.Dockerfile "
                 f"-t REGISTRY/agentsaga/{image}:0.1.0 build/{image}")
        assert context in result.stderr and build in result.stderr
        assert "docs/deploy.md" in result.stderr
    # the build commands the message names are the ones docs/deploy.md documents
    deploy = (CHART.parents[1] / "docs" / "deploy.md").read_text()
    assert f"python -P tools/images.py context {image} build/{image}\n" in deploy
    assert f"docker build --network none -f images/{image}.Dockerfile -t " in deploy


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "connectors.stripe.apiBase=https://stripe.internal",
          "--set", "connectors.stripe.apiKeySecret.name=",
          "--set", "connectors.zendesk.url=https://acme.zendesk.com"],
         "connectors.stripe.apiBase is set but connectors.stripe.apiKeySecret.name is not"),
        (["--set", "connectors.jira.url=https://acme.atlassian.net"],
         "connectors.jira.url is set but connectors.jira.project is not"),
        (["--set", "connectors.email.url=https://mail.example"],
         "connectors.email.url is set but connectors.email.from is not"),
    ],
    ids=["stripe-base-without-key", "jira-without-project", "email-without-sender"],
)
def test_a_connector_given_in_part_is_refused(flags: list[str], message: str) -> None:
    """As the sidecar would refuse it at start: with or without the webhook, since the
    connectors ConfigMap serves hand-added sidecars and the Jobs too."""
    for extra in ([], ["--set", "injection.enabled=false"]):
        result = helm("template", "x", str(CHART), "-f", str(MINIMAL_VALUES), *flags, *extra,
                      check=False)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr


@pytest.mark.parametrize(
    "flags",
    [
        ["--set", "connectors.stripe.apiKeySecret.name=stripe-credentials"],
        ["--set", "connectors.zendesk.url=https://acme.zendesk.com"],
        ["--set", "connectors.jira.url=https://acme.atlassian.net",
         "--set", "connectors.jira.project=SUP"],
        ["--set", "connectors.email.url=https://mail.example", "--set",
         "connectors.email.from=support@example.com"],
        ["--set", "sidecar.mcp.upstreams.tickets.url=http://tickets:9000/mcp"],
        ["--set", "sidecar.tools={refund_tools,agentsaga.connectors.tools}"],
        ["--set", "sidecar.extraEnv[0].name=AGENTSAGA_WAREHOUSE_URL",
         "--set", "sidecar.extraEnv[0].value=http://warehouse"],
        ["--set", "injection.enabled=false"],
    ],
    ids=["stripe", "zendesk", "jira", "email", "mcp", "own-module", "extra-env", "no-webhook"],
)
def test_a_sidecar_with_tools_or_without_the_webhook_renders(flags: list[str]) -> None:
    docs = render(*IMAGES, *CREDENTIALS, *flags, base=None)
    injecting = find(docs, "MutatingWebhookConfiguration")
    assert bool(injecting) == ("injection.enabled=false" not in flags)


def test_sidecar_probe_refuses_grpc_with_a_loopback_listener() -> None:
    for listen in ("127.0.0.1:50051", "localhost:50051", "[::1]:50051"):
        result = helm("template", "x", str(CHART), "-f", str(MINIMAL_VALUES), "--set",
                      "sidecar.probe.type=grpc", "--set", f"sidecar.listen={listen}", check=False)
        assert result.returncode != 0
        assert f"not loopback ({listen})" in result.stderr, result.stderr
        assert "set sidecar.listen=0.0.0.0:50051" in result.stderr
    grpc = sidecar_template(render("-f", str(FULL_VALUES)))["container"]
    assert grpc["readinessProbe"]["grpc"] == {"port": 50052}


def sidecar_env(*args: str) -> dict[str, Any]:
    container = sidecar_template(render(*args))["container"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_the_sidecar_is_allowed_to_serve_the_pod_ip_exactly_when_it_listens_there() -> None:
    assert "AGENTSAGA_ALLOW_REMOTE" not in sidecar_env()
    assert "AGENTSAGA_ALLOW_REMOTE" not in sidecar_env(
        "--set", "sidecar.listen=localhost:50051", "--set", "sidecar.mcp.listen=127.0.0.1:8765")
    grpc = sidecar_env("--set", "sidecar.listen=0.0.0.0:50051", "--set", "sidecar.probe.type=grpc")
    assert grpc["AGENTSAGA_ALLOW_REMOTE"] == "true"
    assert grpc["AGENTSAGA_LISTEN"] == "0.0.0.0:50051"
    assert sidecar_env("-f", str(FULL_VALUES))["AGENTSAGA_ALLOW_REMOTE"] == "true"
    # the MCP endpoint is held to the same check by the sidecar
    mcp = sidecar_env("--set", "sidecar.mcp.listen=0.0.0.0:8765")
    assert mcp["AGENTSAGA_ALLOW_REMOTE"] == "true"
    # the rendered variable is one the sidecar reads
    allowed = Settings.from_env({"AGENTSAGA_ALLOW_REMOTE": grpc["AGENTSAGA_ALLOW_REMOTE"]})
    assert allowed.allow_remote


def test_manual_sidecar_template_renders_the_webhook_container(tmp_path: Path) -> None:
    """An application chart that depends on agentsaga includes `agentsaga.sidecar`: the container
    is the very one the webhook injects (sidecar.json)."""
    app = tmp_path / "app"
    (app / "templates").mkdir(parents=True)
    (app / "charts").mkdir()
    shutil.copytree(CHART, app / "charts" / "agentsaga")
    (app / "Chart.yaml").write_text(
        "apiVersion: v2\nname: app\nversion: 1.0.0\n"
        "dependencies:\n  - name: agentsaga\n    version: 0.1.0\n"
    )
    (app / "values.yaml").write_text(
        yaml.safe_dump({"agentsaga": yaml.safe_load(EXAMPLE_VALUES.read_text())})
    )
    (app / "templates" / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: agent\nspec:\n"
        "  initContainers:\n"
        '    {{- include "agentsaga.sidecar" (index .Subcharts "agentsaga") | nindent 4 }}\n'
        "  containers:\n    - name: agent\n      image: example/agent:1\n"
        "  volumes:\n"
        '    {{- include "agentsaga.sidecarVolumes" (index .Subcharts "agentsaga") | nindent 4 }}\n'
    )
    docs = render(chart=app, release="saga")
    pod = one(docs, "Pod")
    validate(pod)
    expected = sidecar_template(docs)
    assert pod["spec"]["initContainers"] == [expected["container"]]
    assert pod["spec"]["volumes"] == expected["volumes"]


def test_notes_explain_listing_and_approving() -> None:
    minimal = ("-f", str(MINIMAL_VALUES))
    notes = helm("template", "saga", str(CHART), *minimal, "--show-only", "templates/NOTES.txt",
                 check=False)
    # NOTES.txt is not a manifest; render it through `helm install --dry-run` instead
    result = helm("install", "saga", str(CHART), *minimal, "--dry-run=client", "-n",
                  "agentsaga-system")
    text = result.stdout
    assert notes.returncode != 0 or "kubectl get agentruns" in notes.stdout
    assert "kubectl get agentruns" in text
    assert "kubectl patch agentrun NAME --subresource=status --type=merge" in text
    assert '"planHash":"<hash>","decision":"Approved","approver":"<you>"' in text
    assert "kubectl wait agentrun/NAME --for=condition=PivotApproved" in text


def test_the_sidecar_serves_mcp_with_its_upstreams_when_asked(tmp_path: Path) -> None:
    values = tmp_path / "mcp.yaml"
    values.write_text(yaml.safe_dump({"sidecar": {"mcp": {
        "listen": "127.0.0.1:8765",
        "upstreams": {"tickets": {"url": "http://tickets.support:9000/mcp",
                                  "tools": {"search_tickets": {"class": "pure"}}}}}}}))
    docs = render("-f", str(values))
    for doc in docs:
        validate(doc)
    upstreams = next(d for d in find(docs, "ConfigMap")
                     if d["metadata"]["name"].endswith("-connectors-mcp"))
    parsed = declarations.parse(yaml.safe_load(upstreams["data"]["upstreams.yaml"]))
    assert parsed.upstreams["tickets"].tools["search_tickets"].cls == "pure"
    template = sidecar_template(docs)
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in template["container"]["env"]}
    assert env["AGENTSAGA_MCP_LISTEN"] == "127.0.0.1:8765"
    assert env["AGENTSAGA_MCP_UPSTREAMS"] == "/etc/agentsaga/mcp/upstreams.yaml"
    assert env["AGENTSAGA_TOOLS"].endswith(",agentsaga.connectors.mcp_tools")
    assert env["AGENTSAGA_POD_RUN_ID"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['agentsaga.io/run-id']"}}
    mounts = {m["mountPath"] for m in template["container"]["volumeMounts"]}
    assert "/etc/agentsaga/mcp" in mounts
    notes = helm("install", "saga", str(CHART), "--dry-run=client", "-n", "agentsaga-system",
                 "-f", str(MINIMAL_VALUES), "-f", str(values)).stdout
    assert "http://127.0.0.1:8765/mcp" in notes and "Agentsaga-Run-Id" in notes


@pytest.mark.parametrize("values", VALUE_SETS)
def test_the_operator_holds_no_sidecar_credential(values: str) -> None:
    """The operator connects as its own role (AGENTSAGA_OPERATOR_DSN); the sidecar's DSN Secret
    is nowhere in its Deployment, and the operator's settings pick the operator DSN."""
    from agentsaga.operator.main import build_config

    docs = render(*VALUE_SETS[values])
    deployment = one(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert "AGENTSAGA_DSN" not in env and "AGENTSAGA_DSN_FILE" not in env
    def secret_refs(variables: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [e["valueFrom"]["secretKeyRef"] for e in variables
                if "secretKeyRef" in (e.get("valueFrom") or {})]

    # the sidecar's database credential: a DSN Secret, or (postgres.credentials.location) its
    # namespace's user and password
    sidecar_env = sidecar_template(docs)["container"]["env"]
    credential = secret_refs([e for e in sidecar_env
                              if e["name"] in ("AGENTSAGA_DSN", "PGUSER", "PGPASSWORD")])
    assert credential
    operator_refs = secret_refs(container["env"])
    assert not [ref for ref in credential if ref in operator_refs]
    assert env["AGENTSAGA_OPERATOR_DSN"]["valueFrom"]["secretKeyRef"]["name"]
    options = argparse.Namespace(dsn=None, webhook_port=None, webhook_cert_dir=None,
                                 resync_interval=None, full_resync_interval=None,
                                 watch_timeout=None)
    _, dsn = build_config(options, Settings.from_env(
        {"AGENTSAGA_OPERATOR_DSN": "postgresql://operator@db/saga"}))
    assert dsn == "postgresql://operator@db/saga"


def test_each_agent_namespace_gets_an_access_token_mounted_in_the_sidecar(
        tmp_path: Path) -> None:
    docs = render("-f", str(FULL_VALUES))
    secrets = [d for d in find(with_setup_job(docs), "Secret")
               if d["metadata"]["name"].endswith("-sidecar-access")]
    namespaces = {d["metadata"]["namespace"] for d in find(docs, "ServiceAccount")
                  if d["metadata"]["name"] == "saga-agent"}
    assert {s["metadata"]["namespace"] for s in secrets} == namespaces and namespaces
    tokens = [base64.b64decode(s["data"]["token"]).decode() for s in secrets]
    assert all(len(t) == 48 for t in tokens) and len(set(tokens)) == len(tokens)
    template = sidecar_template(docs)
    env = {e["name"]: e.get("value") for e in template["container"]["env"]}
    path = env["AGENTSAGA_ACCESS_TOKEN_FILE"]
    mounts = {m["name"]: m for m in template["container"]["volumeMounts"]}
    assert path.startswith(mounts["agentsaga-access-token"]["mountPath"] + "/")
    assert mounts["agentsaga-access-token"]["readOnly"] is True
    volumes = {v["name"]: v for v in template["volumes"]}
    assert volumes["agentsaga-access-token"]["secret"]["secretName"] == \
        secrets[0]["metadata"]["name"]
    # the rendered variable is one the sidecar reads (a file, as mounted)
    (tmp_path / "token").write_text(tokens[0])
    mounted = Settings.from_env({"AGENTSAGA_ACCESS_TOKEN_FILE": str(tmp_path / "token")})
    assert mounted.access_token == tokens[0]


def test_network_policy_is_on_by_default_and_lets_nothing_in() -> None:
    docs = render("-f", str(MINIMAL_VALUES))
    policies = find(docs, "NetworkPolicy")
    assert policies, "no NetworkPolicy by default"
    for policy in policies:
        validate(policy)
        assert policy["spec"]["ingress"] == []
        assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress open until postgres is named
    full = find(render("-f", str(FULL_VALUES)), "NetworkPolicy")
    assert full and all(p["spec"]["policyTypes"] == ["Ingress", "Egress"] for p in full)
    assert not find(render("-f", str(MINIMAL_VALUES), "--set", "networkPolicy.enabled=false"),
                    "NetworkPolicy")


def test_the_charts_jobs_have_no_token_a_deadline_and_a_ttl() -> None:
    """The operator's Job settings as the chart renders them, through the operator's own code."""
    from agentsaga.operator.job_manifests import build_job

    deployment = one(render(), "Deployment")
    env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0][
        "env"] if "value" in e and e["name"].startswith("AGENTSAGA_JOB")}
    config = Settings.from_env({**env, "AGENTSAGA_SIDECAR_IMAGE": "sidecar:1"}).operator
    run = {"metadata": {"name": "refund-1182", "namespace": "agents", "uid": "u-1"}}
    job = build_job(run, "unwind", "agentsaga-refund-1182-unwind-e2", "refund-1182", config, None)
    assert job["spec"]["activeDeadlineSeconds"] == 1800
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "agentsaga-sidecar"


def test_retention_cronjob_prunes_as_the_migration_role_without_api_credentials() -> None:
    cron = one(render("-f", str(FULL_VALUES)), "CronJob")
    assert cron["spec"]["schedule"] == "5 2 * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["args"] == ["prune", "--ended-before=14d", "--batch=1000"]
    env = {e["name"]: e for e in container["env"]}
    # deleting whole runs is maintenance: the migration role's DSN, never a sidecar's
    assert set(env) == {"AGENTSAGA_MIGRATE_DSN"}
    assert env["AGENTSAGA_MIGRATE_DSN"]["valueFrom"]["secretKeyRef"] == {
        "name": "saga-postgres-migrate", "key": "connection-string"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    off = render("--set", "retention.enabled=false")
    assert not [d for d in off if d and d.get("kind") == "CronJob"]
