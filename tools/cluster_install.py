"""Install agentsaga and the refund example's agent into a Kubernetes cluster: the steps that
`make cluster` runs against its local cluster, and that you run against your own (kind, k3d or
a real one) with other inputs.

    .venv/bin/python -P tools/cluster_install.py --registry REGISTRY \\
        --migrate-dsn 'postgresql://postgres:PASSWORD@db.example:5432/agentsaga' \\
        --location 'postgresql://db.example:5432/agentsaga' \\
        --world-url http://HOST:8470

What it does, with tools/bin/kubectl and tools/bin/helm against $KUBECONFIG:

1. the images (tools/images.py builds them from uv.lock; examples/refund/sidecar.Dockerfile puts
   the example's tools into the sidecar image) are pushed to REGISTRY with skopeo, or, for the
   local cluster, were loaded into its containerd by `make cluster` (no registry);
2. namespaces agentsaga-system (the operator) and refunds (the agent), and in the first one the
   two DSN Secrets the chart reads: agentsaga-postgres-migrate (the migration hook's role: DDL
   and CREATEROLE) and agentsaga-postgres-operator (role agentsaga_operator);
3. the chart, with charts/agentsaga/examples/values-local.yaml and the inputs above (written to
   DIR/install-values.yaml): per-namespace credentials (`postgres.credentials.location`: the
   migration Job creates refunds' own roles), the example's tools in the sidecar, the stand-in
   vendors' URL for them;
4. once the webhook admits pods: an approver's RoleBinding (--approver), and the first run of
   the agent, examples/refund/kubernetes/refund-run.yaml (an AgentRun and a Job, run refund-1).

The stand-in vendors (`agentsaga world`) are for trying the example only: the chart and the
images never need them; a real agent's tools call the real APIs.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KUBECTL = ROOT / "tools" / "bin" / "kubectl"
HELM = ROOT / "tools" / "bin" / "helm"
CHART = ROOT / "charts" / "agentsaga"
VALUES = CHART / "examples" / "values-local.yaml"
RUN_MANIFEST = ROOT / "examples" / "refund" / "kubernetes" / "refund-run.yaml"
RELEASE, SYSTEM, AGENTS = "agentsaga", "agentsaga-system", "refunds"
LOCAL_IMAGES = {
    "operator": "localhost/agentsaga-operator:local",
    "sidecar": "localhost/agentsaga-sidecar-refunds:local",
    "agent": "localhost/agentsaga-refund-agent:local",
}
"""The names the images carry in the local cluster (and the run manifest's agent image)."""


class InstallFailed(RuntimeError):
    """A step failed; the message says which and what it printed."""


@dataclass
class Inputs:
    """What differs from one cluster to the next."""

    images: dict[str, str]
    """operator, sidecar (with the example's tools), agent -> the reference pods pull."""
    migrate_dsn: str
    """The migration role's DSN, as pods reach Postgres (DDL rights, CREATEROLE)."""
    operator_dsn: str
    """Role agentsaga_operator's DSN, as pods reach Postgres."""
    location: str
    """Postgres as pods reach it, without user or password (postgres.credentials.location)."""
    world_url: str
    """The stand-in vendors, as pods reach them (the example's tools call them)."""
    state: Path
    """Where the generated values are written."""
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    approver: str = ""
    """A person to bind the chart's approver ClusterRole to in `refunds` ("" for none)."""
    pull_policy: str = "IfNotPresent"


def run(command: Sequence[str], env: dict[str, str], *, input: str | None = None,
        timeout: float = 120) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True, input=input,
                          env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        raise InstallFailed(f"`{' '.join(command)}` failed (exit {done.returncode}):\n"
                            f"{(done.stderr or done.stdout).strip()}")
    return done.stdout


def kubectl(inputs: Inputs, *args: str, input: str | None = None) -> str:
    return run([str(KUBECTL), *args], inputs.env, input=input)


def apply(inputs: Inputs, *objects: dict[str, object]) -> None:
    kubectl(inputs, "apply", "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def _secret(name: str, dsn: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": SYSTEM},
            "data": {"dsn": base64.b64encode(dsn.encode()).decode()}}


def install_values(inputs: Inputs) -> Path:
    """The inputs as a values file, given to helm after values-local.yaml."""
    def image(name: str) -> dict[str, str]:
        repository, tag = inputs.images[name].rsplit(":", 1)
        return {"repository": repository, "tag": tag, "pullPolicy": inputs.pull_policy}

    values = {
        "postgres": {"credentials": {"location": inputs.location}},
        "operator": {"image": image("operator")},
        "sidecar": {"image": image("sidecar"), "extraEnv": [
            {"name": "EXAMPLE_WORLD_URL", "value": inputs.world_url},
            {"name": "AGENTSAGA_RECHECK_PAUSE_S", "value": "0.2"}]},
    }
    inputs.state.mkdir(parents=True, exist_ok=True)
    path = inputs.state / "install-values.yaml"
    path.write_text("# written by tools/cluster_install.py: this cluster's inputs\n"
                    + json.dumps(values, indent=2) + "\n")
    return path


def agent_pod(inputs: Inputs) -> dict[str, object]:
    """The run manifest's pod, for a server-side dry run that the webhook must admit."""
    [job] = [doc for doc in run_manifest(inputs, "webhook-probe") if doc["kind"] == "Job"]
    template = job["spec"]["template"]  # type: ignore[index]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**template["metadata"], "name": "webhook-probe",
                         "namespace": AGENTS},
            "spec": template["spec"]}


def run_manifest(inputs: Inputs, run_id: str) -> list[dict[str, object]]:
    """examples/refund/kubernetes/refund-run.yaml for run `run_id`, with this cluster's agent
    image."""
    import yaml  # the project's environment has it (the chart tests use it)

    text = RUN_MANIFEST.read_text().replace("refund-1", run_id)
    text = text.replace(LOCAL_IMAGES["agent"], inputs.images["agent"])
    return [doc for doc in yaml.safe_load_all(text) if doc]


def wait_for_the_webhook(inputs: Inputs, timeout: float = 90.0) -> None:
    """Until the API server reaches the operator's webhook through its Service (kube-proxy
    programs the Service a moment after the operator's pod is Ready): a server-side dry run of
    an agent pod, which comes back with the sidecar injected."""
    pod = json.dumps(agent_pod(inputs))
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run([str(KUBECTL), "create", "--dry-run=server", "-o", "json",
                               "-f", "-"], input=pod, capture_output=True, text=True,
                              env=inputs.env, check=False, timeout=60)
        if done.returncode == 0 and "agentsaga-sidecar" in done.stdout:
            return
        if time.monotonic() > deadline:
            raise InstallFailed(f"the webhook does not inject the sidecar after {timeout:g} s: "
                                f"{done.stderr.strip() or 'the pod came back without it'}")
        time.sleep(0.5)


def install(inputs: Inputs, say: Callable[[str], object] = print) -> None:
    """Steps 2 to 4 of the module's docstring (the images are in place)."""
    for name in (SYSTEM, AGENTS):
        apply(inputs, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    apply(inputs, _secret("agentsaga-postgres-migrate", inputs.migrate_dsn),
          _secret("agentsaga-postgres-operator", inputs.operator_dsn))
    values = install_values(inputs)
    say(f"helm upgrade --install {RELEASE} charts/agentsaga -n {SYSTEM} "
        f"-f {VALUES.relative_to(ROOT)} -f {values}")
    started = time.monotonic()
    run([str(HELM), "upgrade", "--install", RELEASE, str(CHART), "--namespace", SYSTEM,
         "-f", str(VALUES), "-f", str(values), "--wait", "--timeout=300s"], inputs.env,
        timeout=330)
    say(f"the chart is installed, its migration Job done ({time.monotonic() - started:.0f} s)")
    wait_for_the_webhook(inputs)
    if inputs.approver:
        apply(inputs, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{inputs.approver}-approves", "namespace": AGENTS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "agentsaga-approver"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": inputs.approver}]})
    kubectl(inputs, "apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": run_manifest(inputs, "refund-1")}))
    say("the refund example's agent runs: Job refund-1-agent in namespace refunds")


def push_images(registry: str, tag: str, env: dict[str, str]) -> dict[str, str]:
    """The images built (tools/images.py) and the example's sidecar, pushed with skopeo to
    REGISTRY/agentsaga-operator:TAG, .../agentsaga-sidecar-refunds:TAG,
    .../agentsaga-refund-agent:TAG."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from sagatest.cluster.pod_images import product_images, refund_sidecar

    built = product_images()
    archives = {"operator": built["operator"], "agent": built["agent"],
                "sidecar": refund_sidecar(built["sidecar"])}
    pushed = {}
    for name, image in archives.items():
        target = (f"{registry.rstrip('/')}/"
                  f"{LOCAL_IMAGES[name].split('/', 1)[1].rsplit(':', 1)[0]}:{tag}")
        print(f"skopeo copy {image.archive} docker://{target}", flush=True)
        run(["skopeo", "copy", f"oci-archive:{image.archive}", f"docker://{target}"], env,
            timeout=600)
        pushed[name] = target
    return pushed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/cluster_install.py",
        description="Install agentsaga and the refund example's agent into the cluster of "
        "$KUBECONFIG (docs/local-cluster.md, 'Your own cluster').")
    parser.add_argument("--registry", required=True,
                        help="where to push the images (e.g. localhost:5001 for kind's or "
                        "k3d's registry, registry.example.com/acme); the cluster pulls them")
    parser.add_argument("--tag", default="local", help="the images' tag (default: local)")
    parser.add_argument("--migrate-dsn", required=True,
                        help="a DSN of a role with DDL rights and CREATEROLE, as pods reach "
                        "Postgres")
    parser.add_argument("--operator-dsn",
                        help="role agentsaga_operator's DSN as pods reach Postgres (default: "
                        "--migrate-dsn's server and database, user agentsaga_operator); give "
                        "its password, once the migration created the role, with "
                        "ALTER ROLE agentsaga_operator PASSWORD ...")
    parser.add_argument("--location", required=True,
                        help="Postgres as pods reach it, no user or password "
                        "(postgres.credentials.location)")
    parser.add_argument("--world-url", required=True,
                        help="`agentsaga world --host 0.0.0.0` as pods reach it")
    parser.add_argument("--approver", default="",
                        help="a user to let approve plans in namespace refunds")
    parser.add_argument("--state", default=str(ROOT / ".cluster"),
                        help="where to write the generated values (default: .cluster)")
    args = parser.parse_args(argv)
    for binary in (KUBECTL, HELM):
        if not binary.exists():
            print(f"{binary} is missing: run `make tools` first", file=sys.stderr)
            return 2
    if not os.environ.get("KUBECONFIG"):
        print("KUBECONFIG is not set: export KUBECONFIG=... (the cluster to install into)",
              file=sys.stderr)
        return 2
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    operator_dsn = args.operator_dsn
    if not operator_dsn:
        params = conninfo_to_dict(args.migrate_dsn)
        params.pop("password", None)
        params["user"] = "agentsaga_operator"
        operator_dsn = make_conninfo(**params)  # type: ignore[arg-type]
    env = dict(os.environ)
    try:
        images = push_images(args.registry, args.tag, env)
        install(Inputs(images=images, migrate_dsn=args.migrate_dsn, operator_dsn=operator_dsn,
                       location=args.location, world_url=args.world_url,
                       state=Path(args.state), env=env, approver=args.approver))
    except InstallFailed as failed:
        print(f"install failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
