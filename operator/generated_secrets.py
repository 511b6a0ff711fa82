"""The chart's generated material, made in the cluster instead of at render time: the chart's
pre-install/pre-upgrade hook Job runs `python -P -m agentsaga.operator.generated_secrets`, so
two renders of the chart with the same values are identical (GitOps tools render on every sync)
and nothing is re-keyed by a render.

What it makes, each only when absent (an existing Secret's data is never changed, so upgrades
and re-syncs keep every password, token and certificate; one an earlier chart version rendered
gets the annotation helm.sh/resource-policy: keep, so that the upgrade does not delete it):

- the webhook's serving certificate and its CA (Secret `<webhook>-tls`: tls.crt, tls.key,
  ca.crt) unless cert-manager issues it; the operator reads it at start and puts ca.crt into
  its MutatingWebhookConfiguration's caBundle (`--webhook-configuration`);
- each agent namespace's sidecar access token (Secret `<release>-sidecar-access`, key token);
- each agent namespace's database credentials (Secret `<release>-db-credentials`: sidecar-user,
  sidecar-password, job-user, job-password) and, in the release namespace, the migration Job's
  copy of every such password by role name (`<release>-db-credentials-migrate`, rewritten from
  the namespaces' Secrets on every run);
- on an upgrade, the chart's CustomResourceDefinitions (Helm installs crds/ once and never
  updates it): each file of `crds` is created, or replaces the served one.

The plan is JSON in AGENTSAGA_GENERATED_SECRETS (the chart writes it into the Job):
    {"labels": {...},
     "webhookTLS": {"namespace": NS, "secret": NAME, "service": SVC, "validityDays": N} | null,
     "accessTokens": [{"namespace": NS, "secret": NAME}],
     "dbCredentials": {"secret": NAME, "migrateSecret": NAME, "releaseNamespace": NS,
                       "namespaces": [{"namespace": NS, "sidecarRole": R, "jobRole": R}]} | null,
     "crds": "/etc/agentsaga/crds" | null}
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import logging
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentsaga.environment import name_of
from agentsaga.errors import ConfigurationError
from agentsaga.settings import OperatorSettings, Settings

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
PLAN_VARIABLE = name_of(OperatorSettings, "setup_plan")
KEEP_ANNOTATION = "helm.sh/resource-policy"


@dataclasses.dataclass(frozen=True)
class Plan:
    labels: dict[str, str]
    webhook_tls: Obj | None
    access_tokens: list[Obj]
    db_credentials: Obj | None
    crds: Path | None

    @classmethod
    def parse(cls, text: str) -> Plan:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{PLAN_VARIABLE} is not JSON ({exc}): it is written by "
                                     "the chart's generated-secrets Job; render it again") from exc
        if not isinstance(raw, dict):
            raise ConfigurationError(f"{PLAN_VARIABLE} must be a JSON object, got {text[:80]!r}")
        crds = raw.get("crds")
        return cls(labels=dict(raw.get("labels") or {}), webhook_tls=raw.get("webhookTLS"),
                   access_tokens=list(raw.get("accessTokens") or []),
                   db_credentials=raw.get("dbCredentials"),
                   crds=Path(crds) if crds else None)


def _b64(value: str | bytes) -> str:
    data = value.encode() if isinstance(value, str) else value
    return base64.b64encode(data).decode()


def webhook_certificate(service: str, namespace: str, days: int) -> dict[str, bytes]:
    """A CA and a serving certificate it signs for the webhook's Service names (PEM)."""
    now = datetime.datetime.now(datetime.UTC)
    not_after = now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
             f"{service}.{namespace}.svc.cluster.local"]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[2])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return {"tls.crt": cert.public_bytes(serialization.Encoding.PEM),
            "tls.key": key.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()),
            "ca.crt": ca.public_bytes(serialization.Encoding.PEM)}


def secret_body(plan: Plan, namespace: str, name: str, kind: str,
                data: Mapping[str, str | bytes], component: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "type": kind,
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {**plan.labels, "app.kubernetes.io/component": component}},
            "data": {key: _b64(value) for key, value in sorted(data.items())}}


def token_data() -> dict[str, str]:
    return {"token": secrets.token_urlsafe(36)}


def credentials_data(sidecar_role: str, job_role: str) -> dict[str, str]:
    return {"sidecar-user": sidecar_role, "sidecar-password": secrets.token_urlsafe(24),
            "job-user": job_role, "job-password": secrets.token_urlsafe(24)}


def fresh_secrets(plan: Plan) -> list[Obj]:
    """The Secrets the Job makes in a cluster holding none of them (what a render of the chart
    stands for once its setup Job has run: the chart tests read them)."""
    made: list[Obj] = []
    if plan.webhook_tls:
        spec = plan.webhook_tls
        made.append(secret_body(plan, spec["namespace"], spec["secret"], "kubernetes.io/tls",
                                webhook_certificate(spec["service"], spec["namespace"],
                                                    int(spec["validityDays"])), "webhook"))
    for token in plan.access_tokens:
        made.append(secret_body(plan, token["namespace"], token["secret"], "Opaque",
                                token_data(), "sidecar"))
    if plan.db_credentials:
        spec = plan.db_credentials
        passwords: dict[str, str] = {}
        for entry in spec["namespaces"]:
            data = credentials_data(entry["sidecarRole"], entry["jobRole"])
            passwords[entry["sidecarRole"]] = data["sidecar-password"]
            passwords[entry["jobRole"]] = data["job-password"]
            made.append(secret_body(plan, entry["namespace"], spec["secret"], "Opaque", data,
                                    "sidecar"))
        made.append(secret_body(plan, spec["releaseNamespace"], spec["migrateSecret"], "Opaque",
                                passwords, "migration"))
    return made


class Generator:
    """Creates what the plan names, where absent, with the client's credentials."""

    def __init__(self, api: client.ApiClient, plan: Plan) -> None:
        self.core = client.CoreV1Api(api)
        self.extensions = client.ApiextensionsV1Api(api)
        self.plan = plan
        self.made: list[str] = []
        self.kept: list[str] = []

    def run(self) -> None:
        if self.plan.webhook_tls:
            self._webhook_tls(self.plan.webhook_tls)
        for token in self.plan.access_tokens:
            self._ensure(token["namespace"], token["secret"], "Opaque", token_data, "sidecar")
        if self.plan.db_credentials:
            self._db_credentials(self.plan.db_credentials)
        if self.plan.crds:
            self._crds(self.plan.crds)

    # -- Secrets ---------------------------------------------------------------------------

    def _read(self, namespace: str, name: str) -> Obj | None:
        try:
            response: Any = self.core.read_namespaced_secret(name, namespace,
                                                             _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        found: Obj = json.loads(response.data)
        return found

    def _ensure(self, namespace: str, name: str, kind: str, make: Any, component: str) -> Obj:
        """The Secret's data (base64, as served): the existing one's, else a new one's."""
        found = self._read(namespace, name)
        if found is not None:
            self._keep_from_helm(found)
            self.kept.append(f"{namespace}/{name}")
            return dict(found.get("data") or {})
        body = secret_body(self.plan, namespace, name, kind, make(), component)
        try:
            self.core.create_namespaced_secret(namespace, body)  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status != 409:  # another run made it in between: keep that one
                raise
            return dict((self._read(namespace, name) or {}).get("data") or {})
        self.made.append(f"{namespace}/{name}")
        return dict(body["data"])

    def _keep_from_helm(self, secret: Obj) -> None:
        """A Secret an earlier version of the chart rendered is an object of the release, which
        this upgrade would delete (it is no longer rendered): the annotation
        helm.sh/resource-policy: keep, read by Helm on the live object, makes Helm leave it."""
        metadata = secret["metadata"]
        if (metadata.get("labels") or {}).get("app.kubernetes.io/managed-by") != "Helm":
            return
        if (metadata.get("annotations") or {}).get(KEEP_ANNOTATION) == "keep":
            return
        self.core.patch_namespaced_secret(metadata["name"], metadata["namespace"], [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": metadata["resourceVersion"]},
            {"op": "add", "path": "/metadata/annotations",
             "value": {**(metadata.get("annotations") or {}), KEEP_ANNOTATION: "keep"}}])

    def _webhook_tls(self, spec: Obj) -> None:
        self._ensure(spec["namespace"], spec["secret"], "kubernetes.io/tls",
                     lambda: webhook_certificate(spec["service"], spec["namespace"],
                                                 int(spec["validityDays"])), "webhook")

    def _db_credentials(self, spec: Obj) -> None:
        passwords: dict[str, str] = {}
        for entry in spec["namespaces"]:
            roles = {"sidecar": entry["sidecarRole"], "job": entry["jobRole"]}
            data = self._ensure(entry["namespace"], spec["secret"], "Opaque",
                                lambda r=roles: credentials_data(r["sidecar"], r["job"]),
                                "sidecar")
            for kind, role in roles.items():
                password = data.get(f"{kind}-password")
                if not password:
                    raise ConfigurationError(
                        f"Secret {entry['namespace']}/{spec['secret']} has no {kind}-password: "
                        f"it was made by hand; add the key {kind}-password (and {kind}-user "
                        f"{role}), or delete the Secret so that it is made again")
                passwords[role] = base64.b64decode(password).decode()
        body = secret_body(self.plan, spec["releaseNamespace"], spec["migrateSecret"], "Opaque",
                           passwords, "migration")
        if self._read(spec["releaseNamespace"], spec["migrateSecret"]) is None:
            self.core.create_namespaced_secret(spec["releaseNamespace"], body)  # type: ignore[arg-type]
        else:
            self.core.replace_namespaced_secret(spec["migrateSecret"], spec["releaseNamespace"],
                                                body)  # type: ignore[arg-type]

    # -- CRDs ------------------------------------------------------------------------------

    def _crds(self, folder: Path) -> None:
        crds = [doc for path in sorted(folder.glob("*.yaml"))
                for doc in yaml.safe_load_all(path.read_text()) if doc]
        for crd in crds:
            name = crd["metadata"]["name"]
            try:
                response: Any = self.extensions.read_custom_resource_definition(
                    name, _preload_content=False)
                served: Obj | None = json.loads(response.data)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                served = None
            if served is None:
                self.extensions.create_custom_resource_definition(crd)
                self.made.append(f"crd/{name}")
                continue
            metadata = served["metadata"]
            crd["metadata"] = {**metadata, **crd["metadata"],
                               "labels": {**(metadata.get("labels") or {}),
                                          **(crd["metadata"].get("labels") or {})},
                               "annotations": {**(metadata.get("annotations") or {}),
                                               **(crd["metadata"].get("annotations") or {})}}
            crd["metadata"]["resourceVersion"] = metadata["resourceVersion"]
            self.extensions.replace_custom_resource_definition(name, crd)
            self.made.append(f"crd/{name} (replaced)")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        text = Settings.from_env().operator.setup_plan
    except ConfigurationError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if not text:
        print(f"{PLAN_VARIABLE} is not set: this module runs as the chart's generated-secrets "
              "hook Job, which sets it", file=sys.stderr)
        return 2
    try:
        plan = Plan.parse(text)
    except ConfigurationError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    from agentsaga.operator.kube import api_client

    generator = Generator(api_client(), plan)
    try:
        generator.run()
    except ConfigurationError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    for name in generator.made:
        print(f"made {name}")
    for name in generator.kept:
        print(f"kept {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
