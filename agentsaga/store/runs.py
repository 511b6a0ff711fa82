"""Runs (`saga_runs`): begin or adopt (R12 epochs), read, change state and the pivot record."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from agentsaga.errors import Fenced, PermissionDenied, RunNotFound
from agentsaga.keys import log_run_id
from agentsaga.states import RunState
from agentsaga.store.base import StoreBase, to_json, to_plan_json
from agentsaga.store.connections import translated
from agentsaga.store.fencing import check_epoch
from agentsaga.store.records import (
    RUN_COLUMNS,
    RUN_WIDTH,
    STEP_COLUMNS,
    Adoption,
    PivotRecord,
    Run,
    Step,
    run_from_row,
    step_from_row,
)

_RUN_AND_NEWEST = (
    f"SELECT {', '.join('r.' + c.strip() for c in RUN_COLUMNS.split(','))}, s.*"
    " FROM saga_runs r LEFT JOIN LATERAL"
    f" (SELECT {STEP_COLUMNS} FROM saga_log WHERE saga_log.run_id = r.run_id"
    " ORDER BY step_idx DESC LIMIT 1) s ON true WHERE r.run_id = %s"
)


class RunStatements(StoreBase):
    def begin_run(self, run_id: str, *, agent: str = "", owner: str = "", pod_uid: str = "",
                  namespace: str = "", trace_context: dict[str, Any] | None = None) -> Adoption:
        """Create the run, or adopt it by bumping its owner epoch (R12). A run of a namespace
        is named by its saga-log id, `namespace/run-id` (`keys.log_run_id`)."""
        if log_run_id(namespace, run_id) != run_id:
            raise ValueError(f"run {run_id!r} of namespace {namespace!r} is named "
                             f"{log_run_id(namespace, run_id)!r} in the saga log")
        self.forget(run_id)
        with self.db.transaction() as conn:
            row = conn.execute(
                "INSERT INTO saga_runs (run_id, agent, owner, pod_uid, namespace, trace_context)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING"
                f" RETURNING {RUN_COLUMNS}",
                (run_id, agent, owner, pod_uid, namespace, to_json(trace_context)),
            ).fetchone()
            if row is not None:
                return Adoption(run_from_row(row), adopted=False)
            # R12: a run bound to another pod is adopted only once the operator saw that pod
            # go (`released_pod`); a run of another namespace never
            row = conn.execute(
                "UPDATE saga_runs SET owner_epoch = owner_epoch + 1, owner = %s,"
                " pod_uid = %s, namespace = COALESCE(NULLIF(%s, ''), namespace),"
                " updated_at = now() WHERE run_id = %s"
                " AND (pod_uid = '' OR pod_uid = %s OR pod_uid = released_pod)"
                " AND (namespace = '' OR %s = '' OR namespace = %s)"
                f" RETURNING {RUN_COLUMNS}",
                (owner, pod_uid, namespace, run_id, pod_uid, namespace, namespace),
            ).fetchone()
            current = None if row is not None else conn.execute(
                f"SELECT {RUN_COLUMNS} FROM saga_runs WHERE run_id = %s", (run_id,)).fetchone()
        if row is None and current is not None:
            held = run_from_row(current)
            if namespace and held.namespace and held.namespace != namespace:
                raise PermissionDenied(
                    f"run {run_id!r} belongs to another namespace; choose another run id")
            raise PermissionDenied(
                f"run {run_id!r} is bound to pod {held.owner or held.pod_uid!r}, which is "
                "alive as far as the operator knows; it is adopted only after that pod is "
                "evicted or deleted (R12). Use another run id, or wait for the operator to "
                "mark the run Orphaned.")
        if row is None:  # deleted between the two statements: nothing to adopt
            raise RunNotFound(run_id)
        return Adoption(run_from_row(row), adopted=True)

    def namespaces_with_run(self, bare_run_id: str) -> list[str]:
        """The namespaces whose runs include one called `bare_run_id` ('' for a run outside
        Kubernetes)."""
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT namespace FROM saga_runs WHERE substr(run_id, length(namespace) +"
                " CASE WHEN namespace = '' THEN 1 ELSE 2 END) = %s ORDER BY namespace",
                (bare_run_id,)).fetchall()
        return [str(row[0]) for row in rows]

    def adopt(self, run_id: str, owner: str) -> Run:
        """Take over an existing run (a reconcile/unwind Job): bump the epoch (R12). The run is
        bound to no pod then (the next BeginRun of a pod adopts it)."""
        self.forget(run_id)
        with self.db.transaction() as conn:
            row = conn.execute(
                "UPDATE saga_runs SET owner_epoch = owner_epoch + 1, owner = %s, pod_uid = '',"
                f" updated_at = now() WHERE run_id = %s RETURNING {RUN_COLUMNS}",
                (owner, run_id),
            ).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        return run_from_row(row)

    def run(self, run_id: str) -> Run | None:
        with self.db.connection() as conn:
            row = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM saga_runs WHERE run_id = %s", (run_id,)
            ).fetchone()
        return None if row is None else run_from_row(row)

    def require_run(self, run_id: str) -> Run:
        found = self.run(run_id)
        if found is None:
            raise RunNotFound(run_id)
        return found

    def require_owner(self, run_id: str, epoch: int) -> Run:
        """The run, if `epoch` is still its owner's (R12); else Fenced, before anything is
        read from the real systems or written."""
        run = self.require_run(run_id)
        if run.owner_epoch != epoch:
            self.forget(run_id)
            raise Fenced(run_id, epoch, run.owner_epoch)
        return run

    def runs(self, *, states: Iterable[RunState] | None = None) -> list[Run]:
        with self.db.connection() as conn:
            if states is None:
                rows = conn.execute(f"SELECT {RUN_COLUMNS} FROM saga_runs ORDER BY created_at")
            else:
                rows = conn.execute(
                    f"SELECT {RUN_COLUMNS} FROM saga_runs WHERE state = ANY(%s)"
                    " ORDER BY created_at",
                    ([str(s) for s in states],),
                )
            return [run_from_row(r) for r in rows.fetchall()]

    def set_run_state(self, run_id: str, epoch: int, state: RunState, *,
                      end: bool = False) -> None:
        self.forget(run_id)
        with self.db.transaction() as conn:
            check_epoch(conn, run_id, epoch, allow_ended=True)
            conn.execute(
                "UPDATE saga_runs SET state = %s, updated_at = now(),"
                " ended_at = CASE WHEN %s THEN now() ELSE ended_at END WHERE run_id = %s",
                (str(state), end, run_id),
            )

    def update_run(self, run_id: str, epoch: int, *, pivot: PivotRecord | None = None,
                   state: RunState | None = None, count_irreversible: bool = False) -> Run:
        """Change the pivot record, the state or the irreversible-before-pivot count (R10)."""
        self.forget(run_id)
        with self.db.transaction() as conn:
            check_epoch(conn, run_id, epoch, allow_ended=True)
            row = conn.execute(
                "UPDATE saga_runs SET pivot = COALESCE(%s, pivot), state = COALESCE(%s, state),"
                " irreversible_before_pivot = irreversible_before_pivot + %s,"
                f" updated_at = now() WHERE run_id = %s RETURNING {RUN_COLUMNS}",
                (None if pivot is None else to_plan_json(pivot.to_json()),
                 None if state is None else str(state), 1 if count_irreversible else 0, run_id),
            ).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        return run_from_row(row)

    def decide_pivot(self, run_id: str, decided: PivotRecord, state: RunState) -> bool:
        """Record a decision iff the staged plan is still `decided.plan_hash` and undecided (no
        epoch: the decision is a human's, not the run owner's). Written to `pivot_decision`,
        which only the operator's database role may write (`agentsaga.store.roles`): the plan
        hash, the verdict, who and when, and the commit steps it admits (tool and digest)."""
        self.forget(run_id)
        decision = {"planHash": decided.plan_hash, "decision": decided.decision,
                    "decidedBy": decided.decided_by, "decidedAt": decided.decided_at,
                    "reason": decided.reason,
                    "commit": [{k: step[k] for k in ("tool", "argsDigest", "class", "audience")
                                if k in step} for step in decided.commit]}
        with self.db.transaction() as conn:
            row = conn.execute(
                "UPDATE saga_runs SET pivot_decision = %s, state = %s, updated_at = now()"
                " WHERE run_id = %s AND pivot->>'planHash' = %s"
                " AND (pivot_decision IS NULL OR pivot_decision->>'planHash' <> %s)"
                " RETURNING run_id",
                (to_json(decision), str(state), run_id, decided.plan_hash, decided.plan_hash),
            ).fetchone()
        return row is not None

    # -- the operator's writes (its database role only) ------------------------------------

    def set_policy(self, run_id: str, policy: dict[str, Any]) -> bool:
        """The AgentRun's spec policy, copied into the log for the sidecar; True if it changed."""
        self.forget(run_id)
        with self.db.transaction() as conn:
            row = conn.execute(
                "UPDATE saga_runs SET policy = %s WHERE run_id = %s"
                " AND policy IS DISTINCT FROM %s::jsonb RETURNING run_id",
                (to_json(policy), run_id, to_json(policy))).fetchone()
        return row is not None

    def release_pod(self, run_id: str, pod_uid: str) -> bool:
        """The operator saw the run's bound pod `pod_uid` evicted or deleted: another pod may
        adopt the run now (R12). True if it was still bound to that pod."""
        self.forget(run_id)
        with self.db.transaction() as conn:
            row = conn.execute(
                "UPDATE saga_runs SET released_pod = %s WHERE run_id = %s AND pod_uid = %s"
                " AND released_pod <> %s RETURNING run_id",
                (pod_uid, run_id, pod_uid, pod_uid)).fetchone()
        return row is not None

    def listen_runs(self, on_run: Callable[[str], None], stop: Callable[[], bool], *,
                    timeout: float, on_quiet: Callable[[bool], None]) -> None:
        """LISTEN on the runs' channel until `stop()`: `on_run(run_id)` for each run created
        or changed (its owner, pod, state or pivot) or whose call saw a late effect;
        `on_quiet(True)` once the LISTEN is in place (what was announced before it, the caller
        finds by reading the log), and `on_quiet(False)` after each `timeout` seconds without
        a notification, for the caller's resync. One connection of its own for as long as it
        runs: what is announced while `on_quiet` runs waits on it, and no notification falls
        between two connections. The channel's name is a secret only the operator's role may
        read (migration 017): no namespace's credential can listen to the others' run ids."""
        with translated(self.db.dsn), psycopg.connect(self.db.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT name FROM run_channel").fetchone()
            assert row is not None, "migration 017 writes the channel's name"
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(str(row[0]))))
            on_quiet(True)
            while not stop():
                got = False
                for note in conn.notifies(timeout=timeout, stop_after=64):
                    got = True
                    on_run(note.payload)
                if not got:
                    on_quiet(False)

    def run_and_newest(self, run_id: str) -> tuple[Run | None, Step | None]:
        """The run and its newest step, in one statement (remembered as the run's cursor)."""
        generation = self._cursors.generation
        with self.db.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            row = cur.execute(_RUN_AND_NEWEST, (run_id,)).fetchone()
        if row is None:
            return None, None
        run = run_from_row(row[:RUN_WIDTH])
        step = None if row[RUN_WIDTH] is None else step_from_row(row[RUN_WIDTH:])
        self._cursors.remember(run, step, generation)
        return run, step

    def cursor(self, run_id: str, epoch: int) -> tuple[Run, Step | None] | None:
        """The run and its newest step as this process last wrote them under `epoch`, or None
        (see `agentsaga.store.cursors`)."""
        return self._cursors.get(run_id, epoch)
