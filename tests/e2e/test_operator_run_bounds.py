"""A namespace's credential that begins and ends runs at once, 500 of them as fast as it can,
begins no more runs than its namespace's bounds allow (Postgres, migration 020), and makes an
AgentRun only for those the operator saw running (it binds no run that ended without a step
before it read it):
asserted on the objects in the real API server and the rows of the real Postgres, with the
operator running (real kopf) and following the saga log's announcements."""

from __future__ import annotations

import psycopg

from agentsaga.errors import RunsBounded
from agentsaga.states import RunState
from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user
from sagatest.operator_fixtures import AR, Cluster

NS = "default"
BURST = 500
BOUND = roles.RunBounds(runs_per_window=300, window_s=3600, open_runs=500)
"""A window longer than the test: which runs the bound admits does not depend on its speed."""


def _agentruns(cluster: Cluster) -> list[dict[str, object]]:
    listed = cluster.kube.objects(AR, "agentruns", NS)
    return [item for item in listed if str(item.get("spec", {}).get("runId", "")).startswith(
        ("burst-", "sentinel"))]


def test_runs_begun_and_ended_at_once_make_no_agentruns_and_are_bounded(
        cluster: Cluster) -> None:
    with psycopg.connect(cluster.dsn) as conn:
        roles.provision(conn, NS)
        roles.set_run_bounds(conn, NS, BOUND)
    cluster.start_operator()
    tenant = with_user(cluster.dsn, roles.namespace_role(NS, "sidecar"))
    begun, refused = 0, []
    with SagaLog(tenant, min_size=1, max_size=2).open(migrate=False) as log:
        for i in range(BURST):
            run_id = f"{NS}/burst-{i}"
            try:
                run = log.begin_run(run_id, namespace=NS, owner="agent-pod", pod_uid="uid-1")
            except RunsBounded as exc:
                refused.append(exc)
                continue
            log.set_run_state(run_id, run.run.owner_epoch, RunState.FAILED, end=True)
            begun += 1
    assert begun == BOUND.runs_per_window and len(refused) == BURST - begun
    assert all(exc.retry_after_s is not None and exc.retry_after_s > 0 for exc in refused)
    assert "retry after" in str(refused[0])
    # a run the operator must bind, announced after all of them (the announcements are taken
    # in order): begun by the schema's owner, whom the bound does not count
    with SagaLog(cluster.dsn, min_size=1, max_size=1).open(migrate=False) as log:
        log.begin_run(f"{NS}/sentinel", namespace=NS, owner="agent-pod", pod_uid="uid-1")
    cluster.wait_run("sentinel", lambda run: bool(run))
    with psycopg.connect(cluster.dsn) as conn:
        rows = conn.execute("SELECT count(*) FROM saga_runs WHERE namespace = %s"
                            " AND run_id LIKE %s", (NS, f"{NS}/burst-%")).fetchone()
    assert rows is not None and rows[0] == BOUND.runs_per_window
    made = [str(r["spec"]["runId"]) for r in _agentruns(cluster)]  # type: ignore[index]
    assert "sentinel" in made
    burst = [name for name in made if name.startswith("burst-")]
    # only runs the operator read while they were still open have one (the announcement came
    # as they began; how many is a race), never one the bound refused: at most the bound's
    # 300 of the 500, each of a run in the log
    assert len(burst) <= BOUND.runs_per_window < BURST, len(burst)
    assert {int(name.split("-")[1]) for name in burst} <= set(range(BOUND.runs_per_window))
    print(f"AgentRuns made for {BURST} runs begun and ended at once: {len(burst)} "
          f"({begun} begun, {len(refused)} refused by the bound)")
