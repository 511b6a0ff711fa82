"""Two agent namespaces and a run outside Kubernetes, each with a history written by its own
credentials through the store, for the attacks of tests/security/ (real Postgres):

    team-b/refund-7   B's open run, bound to pod-b: step 0 `charge` CONFIRMED (its
                      compensation pays the customer back), step 1 `wire` UNKNOWN that a person
                      settled "did not happen" (NOT_EXECUTED), step 2 `mail` CONFIRMED
                      (irreversible) with a Proposed correction; a plan staged
    team-b/refund-5   B's ended run: step 0 `wire` settled NOT_EXECUTED by a Job (an
                      observation of its effect would make the operator start a Job)
    refund-9          a run outside Kubernetes (the base sidecar role): step 0 `charge`
    team-a/own-1      the attacker's own run: step 0 `charge` CONFIRMED

Every intent is written as a dispatch writes it: under its derived key, with its tool's
contract. `PAYOUTS` records each call of the compensation `payout`, the effect an attacker
wants the victim's unwind to make.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import psycopg

from agentsaga import NO_LOOKUP, Compensation, Registry
from agentsaga.keys import step_key
from agentsaga.saga import contracts
from agentsaga.states import (
    CorrectionState,
    PivotState,
    RunState,
    SettlementOutcome,
    StepStatus,
)
from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user
from agentsaga.store.records import Correction, PivotRecord

A, B = "team-a", "team-b"
VICTIM, ENDED, BARE, OWN = f"{B}/refund-7", f"{B}/refund-5", "refund-9", f"{A}/own-1"
VICTIM_RUNS = (VICTIM, ENDED, BARE)
"""The runs no credential of namespace A may see or change."""
CUSTOMER = {"account": "CUSTOMER-ACCT", "amount": 1200}
ATTACKER = {"account": "ATTACKER-ACCT", "amount": 99999}
PAYOUTS: list[dict[str, Any]] = []


def build_registry() -> Registry:
    registry = Registry()

    @registry.tool(cls="compensatable", lookup=lambda key: None,
                   compensate=lambda args, key: Compensation(
                       "payout", {"account": args["account"], "amount": args["amount"]}))
    def charge(account: str, amount: int, idempotency_key: str) -> dict[str, Any]:
        return {"id": "ch_" + idempotency_key[:6]}

    @registry.tool(cls="irreversible", lookup=NO_LOOKUP)
    def payout(account: str, amount: int, idempotency_key: str) -> dict[str, Any]:
        PAYOUTS.append({"account": account, "amount": amount})
        return {"id": "po_" + idempotency_key[:6]}

    @registry.tool(cls="irreversible", lookup=NO_LOOKUP)
    def wire(amount: int, idempotency_key: str) -> dict[str, Any]:
        return {"id": "w"}

    @registry.tool(cls="irreversible", lookup=NO_LOOKUP)
    def mail(to: str, idempotency_key: str) -> dict[str, Any]:
        return {"id": "m"}

    return registry


@dataclass(frozen=True)
class Credentials:
    """DSNs of every role the attacks use."""

    admin: str
    a_sidecar: str
    a_job: str
    b_sidecar: str
    b_job: str
    operator: str
    base_sidecar: str

    def attacker(self, kind: str) -> str:
        return self.a_sidecar if kind == "sidecar" else self.a_job


def _intent(log: SagaLog, registry: Registry, run_id: str, epoch: int, idx: int, tool: str,
            args: dict[str, Any]) -> None:
    spec = registry.get(tool)
    built = spec.build_compensation(args, step_key(run_id, idx, tool))
    contract, version = contracts.versioned(spec, registry,
                                            None if built is None else built.tool)
    log.record_intent(run_id, epoch, idx, tool=tool, tool_class=spec.cls,
                      key=step_key(run_id, idx, tool), args=args,
                      compensation=None if built is None else built.to_json(),
                      audience=["customer"], contract=contract, contract_hash=version)


def build(dsn: str) -> Credentials:
    """The world above in the migrated database `dsn` (its admin DSN)."""
    with psycopg.connect(dsn) as conn:
        for namespace in (A, B):
            roles.provision(conn, namespace)
    creds = Credentials(
        admin=dsn, a_sidecar=with_user(dsn, roles.namespace_role(A, "sidecar")),
        a_job=with_user(dsn, roles.namespace_role(A, "job")),
        b_sidecar=with_user(dsn, roles.namespace_role(B, "sidecar")),
        b_job=with_user(dsn, roles.namespace_role(B, "job")),
        operator=with_user(dsn, roles.OPERATOR), base_sidecar=with_user(dsn, roles.SIDECAR))
    registry = build_registry()
    with SagaLog(creds.b_sidecar, min_size=1, max_size=2).open(migrate=False) as log:
        epoch = log.begin_run(VICTIM, namespace=B, pod_uid="pod-b", owner="pod-b").run.owner_epoch
        _intent(log, registry, VICTIM, epoch, 0, "charge", CUSTOMER)
        log.record_outcome(VICTIM, epoch, 0, StepStatus.CONFIRMED, external_ref="ch_1")
        _intent(log, registry, VICTIM, epoch, 1, "wire", {"amount": 5})
        log.record_outcome(VICTIM, epoch, 1, StepStatus.UNKNOWN, error="timeout")
        log.ask_human(VICTIM, epoch, 1, step_key(VICTIM, 1, "wire"), "no lookup")
        with SagaLog(creds.operator, min_size=1, max_size=1).open(migrate=False) as operator:
            operator.settle_step(VICTIM, 1, SettlementOutcome.NOT_HAPPENED, settler="alice",
                                 reason="checked the bank")
        _intent(log, registry, VICTIM, epoch, 2, "mail", {"to": "customer@example.com"})
        log.record_outcome(VICTIM, epoch, 2, StepStatus.CONFIRMED, external_ref="m_1")
        log.record_correction(epoch, Correction(
            run_id=VICTIM, step_idx=2, tool="mail", audience=["customer"], rank=1,
            state=CorrectionState.PROPOSED, correction={"text": "sorry"}))
        log.update_run(VICTIM, epoch,
                       pivot=PivotRecord(PivotState.AWAITING_APPROVAL, "plan-of-b"))
        ended = log.begin_run(ENDED, namespace=B, pod_uid="pod-b", owner="pod-b").run.owner_epoch
        _intent(log, registry, ENDED, ended, 0, "wire", {"amount": 7})
        log.record_outcome(ENDED, ended, 0, StepStatus.NOT_EXECUTED)
        log.set_run_state(ENDED, ended, RunState.FAILED, end=True)
    with SagaLog(creds.base_sidecar, min_size=1, max_size=1).open(migrate=False) as log:
        bare = log.begin_run(BARE, pod_uid="pod-x", owner="pod-x").run.owner_epoch
        _intent(log, registry, BARE, bare, 0, "charge", CUSTOMER)
        log.record_outcome(BARE, bare, 0, StepStatus.CONFIRMED, external_ref="ch_9")
    with SagaLog(creds.a_sidecar, min_size=1, max_size=1).open(migrate=False) as log:
        own = log.begin_run(OWN, namespace=A, pod_uid="pod-a", owner="pod-a").run.owner_epoch
        _intent(log, registry, OWN, own, 0, "charge", {"account": "A-ACCT", "amount": 3})
        log.record_outcome(OWN, own, 0, StepStatus.CONFIRMED, external_ref="ch_a")
    return creds


def schema_tables(conn: psycopg.Connection[Any]) -> list[str]:
    """Every table and view of the schema (the catalog's list, so a new one is attacked too)."""
    return [str(r[0]) for r in conn.execute(
        "SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace"
        " AND c.relkind IN ('r', 'p', 'v', 'm') ORDER BY 1")]


def schema_sequences(conn: psycopg.Connection[Any]) -> list[str]:
    return [str(r[0]) for r in conn.execute(
        "SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace"
        " AND c.relkind = 'S' ORDER BY 1")]


def snapshot(dsn: str) -> dict[str, list[str]]:
    """Every row of every table of the schema, as the migration role sees them (not the
    sequences: an INSERT refused by row-level security has drawn its id already)."""
    with psycopg.connect(dsn) as conn:
        seen = {table: sorted(json.dumps(r[0], sort_keys=True, default=str) for r in conn.execute(
            f'SELECT to_jsonb(t) FROM "{table}" t'))  # noqa: S608 - names from the catalog
            for table in schema_tables(conn)}
    return seen


@dataclass(frozen=True)
class Catalog:
    """What the schema holds, read from Postgres's catalog, so that the attacks cover what a
    later migration adds without a change to them."""

    schema: str
    tables: list[str]
    """Tables and views."""
    run_tables: list[str]
    """Those with a `run_id` column."""
    sequences: list[str]
    functions: list[tuple[str, list[str], bool]]
    """(name, argument types, whether it is a trigger function)."""
    schemas: list[str]
    roles: list[str]
    names_read: list[str]
    """Every relation of the schema or of pg_catalog that a function of the schema names."""


def catalog(dsn: str) -> Catalog:
    with psycopg.connect(dsn) as conn:
        [(schema,)] = conn.execute("SELECT current_schema()").fetchall()
        tables = schema_tables(conn)
        run_tables = [str(r[0]) for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
            " WHERE c.relnamespace = current_schema()::regnamespace AND a.attname = 'run_id'"
            " AND c.relkind IN ('r', 'p', 'v', 'm') ORDER BY 1")]
        functions = [(str(name), [str(t) for t in types], bool(trigger)) for name, types, trigger
                     in conn.execute(
            "SELECT p.proname, ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t),"
            " p.prorettype = 'trigger'::regtype FROM pg_proc p"
            " WHERE p.pronamespace = current_schema()::regnamespace ORDER BY 1")]
        bodies = " ".join(str(r[0]) for r in conn.execute(
            "SELECT prosrc FROM pg_proc WHERE pronamespace = current_schema()::regnamespace"))
        relations = {str(r[0]) for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p', 'v', 'm', 'f')"
            " AND relnamespace IN (current_schema()::regnamespace, 'pg_catalog'::regnamespace)")}
        schemas = [str(r[0]) for r in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_temp\\_%'"
            " AND nspname NOT LIKE 'pg\\_toast\\_temp\\_%' ORDER BY 1")]
        every_role = [str(r[0]) for r in conn.execute("SELECT rolname FROM pg_roles ORDER BY 1")]
    words = set(re.findall(r"[a-z_][a-z0-9_]*", bodies.lower()))
    return Catalog(schema=str(schema), tables=tables, run_tables=run_tables,
                   sequences=schema_sequences_of(dsn), functions=functions, schemas=schemas,
                   roles=every_role, names_read=sorted(words & relations))


def schema_sequences_of(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return schema_sequences(conn)


def column_privileges(dsn: str, role: str, table: str, privilege: str) -> list[str]:
    """The columns of `table` on which `role` holds `privilege`."""
    with psycopg.connect(dsn) as conn:
        return [str(r[0]) for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
            " AND NOT attisdropped AND has_column_privilege(%s, attrelid, attnum, %s)"
            " ORDER BY attnum", (table, role, privilege))]
