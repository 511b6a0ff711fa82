"""The chart provisions one database credential of each kind per agent namespace
(postgres.credentials.location): a Secret in each namespace holding only its own two, the
migration hook Job creating exactly those roles with those passwords, the sidecar logging in as
its namespace's sidecar role and the operator's Jobs as its Job role. Adding a namespace is
one values entry (rendered by the real helm; the roles as agentsaga.store.roles names them)."""

from __future__ import annotations

import base64
from typing import Any

from agentsaga.operator.job_manifests import build_job
from agentsaga.settings import Settings
from agentsaga.store import roles
from sagatest.chart_tools import (
    CHART,
    IMAGES,
    MINIMAL_VALUES,
    find,
    helm,
    one,
    render,
    sidecar_template,
    with_setup_job,
)

LOCATION = "postgresql://postgres.databases.svc:5432/agentsaga?sslmode=require"
LONG = "a-namespace-name-that-is-long-enough-to-need-a-digest-in-its-role"[:63]


def _render(*namespaces: str) -> list[dict[str, Any]]:
    return render("--set", "sidecar.namespaces={" + ",".join(namespaces) + "}",
                  "--set", f"postgres.credentials.location={LOCATION}")


def _decoded(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def _credentials(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Each namespace's credentials as the setup Job makes them (the chart renders none)."""
    return {d["metadata"]["namespace"]: _decoded(d)
            for d in find(docs, "Secret", "saga-agentsaga-db-credentials")}


def test_each_namespace_gets_only_its_own_credentials_and_the_migration_makes_them() -> None:
    docs = _render("team-a", "team-b", LONG)
    assert not find(docs, "Secret")  # nothing random at render time: the setup Job makes them
    made = with_setup_job(docs)
    secrets = _credentials(made)
    assert set(secrets) == {"team-a", "team-b", LONG}
    for namespace, data in secrets.items():
        assert set(data) == {"sidecar-user", "sidecar-password", "job-user", "job-password"}
        assert data["sidecar-user"] == roles.namespace_role(namespace, "sidecar")
        assert data["job-user"] == roles.namespace_role(namespace, "job")
        assert len(data["sidecar-password"]) == 32 and len(set(data.values())) == 4
    migrate = one(made, "Secret", "saga-agentsaga-db-credentials-migrate")
    assert migrate["metadata"]["namespace"] == "agentsaga-system"
    assert _decoded(migrate) == {
        data[f"{kind}-user"]: data[f"{kind}-password"]
        for data in secrets.values() for kind in ("sidecar", "job")}
    job = one(docs, "Job", "saga-agentsaga-migrate-1")
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AGENTSAGA_NAMESPACES"] == f"team-a,team-b,{LONG}"
    assert container["volumeMounts"][0]["mountPath"] == env["AGENTSAGA_DB_PASSWORDS_DIR"]


def test_adding_a_namespace_is_one_values_entry() -> None:
    before, after = _render("team-a"), _render("team-a", "team-c")
    assert set(_credentials(with_setup_job(after))) - set(
        _credentials(with_setup_job(before))) == {"team-c"}
    job = one(after, "Job", "saga-agentsaga-migrate-1")
    env = {e["name"]: e.get("value")
           for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["AGENTSAGA_NAMESPACES"] == "team-a,team-c"


def test_the_sidecar_logs_in_as_its_namespaces_sidecar_role_and_a_job_as_its_job_role() -> None:
    template = sidecar_template(_render("team-a"))
    env = {e["name"]: e for e in template["container"]["env"]}
    assert env["AGENTSAGA_DSN"]["value"] == LOCATION  # where, never who
    assert env["PGUSER"]["valueFrom"]["secretKeyRef"] == {
        "name": "saga-agentsaga-db-credentials", "key": "sidecar-user"}
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "sidecar-password"

    run = {"metadata": {"name": "refund-1", "namespace": "team-a", "uid": "u-1"}}
    job = build_job(run, "unwind", "agentsaga-refund-1-unwind-e2", "refund-1",
                    Settings().operator, template)
    job_env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert job_env["PGUSER"]["valueFrom"]["secretKeyRef"]["key"] == "job-user"
    assert job_env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "job-password"


def test_without_a_location_the_chart_refuses_to_render_saying_what_to_set() -> None:
    """A shared DSN cannot work: a sidecar refuses the shared agentsaga_sidecar role, and the
    schema owner's isolates nothing. Refused at render time, naming the values to set."""
    done = helm("template", "agentsaga", str(CHART), "-n", "agentsaga-system", *IMAGES,
                "--set", "connectors.stripe.apiKeySecret.name=stripe-credentials",
                "--set", "sidecar.namespaces={team-a,team-b}", check=False)
    assert done.returncode != 0
    said = " ".join(done.stderr.split())
    assert "postgres.credentials.location is empty, so the agent namespaces (team-a, team-b) " \
        "would share the DSN of Secret agentsaga-postgres" in said, said
    assert "--set postgres.credentials.location=postgresql://" in said
    assert "--set postgres.allowSharedCredentialForDevelopment=true" in said
    assert "agentsaga-db-credentials" in said


def test_the_development_flag_keeps_the_one_dsn_secret_and_warns() -> None:
    flag = ("--set", "postgres.allowSharedCredentialForDevelopment=true")
    docs = render("--set", "sidecar.namespaces={team-a}", "--set",
                  "postgres.credentials.location=", *flag)
    assert _credentials(docs) == {}
    env = {e["name"]: e for e in sidecar_template(docs)["container"]["env"]}
    assert "PGUSER" not in env and "secretKeyRef" in env["AGENTSAGA_DSN"]["valueFrom"]
    notes = helm("install", "agentsaga", str(CHART), "--dry-run=client", "-n", "agentsaga-system",
                 "-f", str(MINIMAL_VALUES), "--set", "postgres.credentials.location=",
                 *flag).stdout
    warning = " ".join(notes[notes.index("WARNING: DEVELOPMENT ONLY"):].split())
    assert warning.startswith(
        "WARNING: DEVELOPMENT ONLY (postgres.allowSharedCredentialForDevelopment=true): every "
        "agent namespace shares the DSN of Secret agentsaga-postgres"), warning
