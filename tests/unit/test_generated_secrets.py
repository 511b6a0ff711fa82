"""The setup Job's program without a cluster: its plan's errors say what to do, its certificate
serves the webhook's Service names, and what it makes in an empty cluster (what the chart tests
read in place of rendered Secrets). Against a real API server: tests/e2e/test_chart_setup_job.py."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from agentsaga.errors import ConfigurationError
from agentsaga.operator.ca_bundle import inject_ca_bundle
from agentsaga.operator.generated_secrets import Plan, fresh_secrets, webhook_certificate

ROOT = Path(__file__).resolve().parents[2]


def test_a_plan_that_is_not_json_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="AGENTSAGA_GENERATED_SECRETS is not JSON"):
        Plan.parse("{not json")
    with pytest.raises(ConfigurationError, match="must be a JSON object"):
        Plan.parse("[1, 2]")


def test_without_a_plan_the_program_says_it_runs_as_the_chart_job() -> None:
    done = subprocess.run([sys.executable, "-P", "-m", "agentsaga.operator.generated_secrets"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert "AGENTSAGA_GENERATED_SECRETS is not set" in done.stderr


def test_the_certificate_serves_the_service_names_and_is_signed_by_its_ca() -> None:
    made = webhook_certificate("saga-agentsaga-webhook", "agentsaga-system", 30)
    cert = x509.load_pem_x509_certificate(made["tls.crt"])
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(made["ca.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {
        "saga-agentsaga-webhook", "saga-agentsaga-webhook.agentsaga-system",
        "saga-agentsaga-webhook.agentsaga-system.svc",
        "saga-agentsaga-webhook.agentsaga-system.svc.cluster.local"}
    assert made["tls.key"].startswith(b"-----BEGIN PRIVATE KEY-----")


def test_an_empty_cluster_gets_each_secret_with_its_keys() -> None:
    plan = Plan.parse(json.dumps({
        "labels": {"app.kubernetes.io/instance": "saga"},
        "accessTokens": [{"namespace": "a", "secret": "t"}, {"namespace": "b", "secret": "t"}],
        "dbCredentials": {"secret": "c", "migrateSecret": "c-migrate", "releaseNamespace": "r",
                          "namespaces": [{"namespace": "a", "sidecarRole": "ns_a",
                                          "jobRole": "job_a"}]}}))
    made = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in fresh_secrets(plan)}
    assert set(made) == {("a", "t"), ("b", "t"), ("a", "c"), ("r", "c-migrate")}
    tokens = {base64.b64decode(made[(n, "t")]["data"]["token"]) for n in ("a", "b")}
    assert len(tokens) == 2
    credentials = {k: base64.b64decode(v).decode() for k, v in made[("a", "c")]["data"].items()}
    migrate = {k: base64.b64decode(v).decode() for k, v in made[("r", "c-migrate")]["data"].items()}
    assert migrate == {"ns_a": credentials["sidecar-password"],
                       "job_a": credentials["job-password"]}
    assert made[("a", "t")]["metadata"]["labels"] == {
        "app.kubernetes.io/instance": "saga", "app.kubernetes.io/component": "sidecar"}


def test_a_missing_ca_file_says_where_it_comes_from(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read the CA .* the chart mounts it"):
        inject_ca_bundle(None, "saga-agentsaga-webhook", tmp_path / "ca.crt")  # type: ignore[arg-type]
