"""The hostile tenant: namespace A's credentials (its sidecar's and its Jobs'), held by whoever
reads A's Secrets or runs code in one of A's pods, attack namespace B's runs and a run outside
Kubernetes with every attack class of the Postgres threat list (docs/security.md), against
every table, view, sequence, function and schema the catalog lists (`tenant_world.catalog`:
what a later migration adds is attacked too). Each attack is refused, or changes no row and
returns nothing of another tenant, and every row of the schema is as it was
(`tenant_world.snapshot`, before and after each attack). The count of attacks per class is
printed at the end of the session (`tally: attacks tried, ...`).

The first tests are the security review's Critical finding, reproduced as it was reported: a
temporary `agentsaga_credentials` claiming namespace B with no kind (and a temporary
`pg_roles`), then each attack it opened."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentsaga.keys import step_key
from agentsaga.saga.pivot import await_decision
from agentsaga.saga.resolution import unwind_run
from agentsaga.states import StepStatus
from agentsaga.store import SagaLog, roles, schema
from sagatest import tenant_world
from sagatest.attacks import Statement, attempt, judged
from sagatest.tenant_world import ATTACKER, BARE, ENDED, OWN, VICTIM, VICTIM_RUNS, A, B

KINDS = ("sidecar", "job")
Record = Callable[[str, object], None]
Attack = tuple[str, Sequence[Statement | str], bool]
"""(what it tries, its statements, whether only a refusal will do)."""


@pytest.fixture
def world(pg: str) -> tenant_world.Credentials:
    tenant_world.PAYOUTS.clear()
    return tenant_world.build(pg)


def _role(kind: str) -> str:
    return roles.namespace_role(A, kind)


def _run(world: tenant_world.Credentials, kind: str, attacks: list[Attack], record: Record,
         cls: str, *, true_is_a_leak: bool = False) -> None:
    """Every attack of `attacks` with A's `kind` credential, each judged on its answer and on
    the rows before and after it; one failure names them all."""
    failures = []
    for name, statements, must_refuse in attacks:
        before = tenant_world.snapshot(world.admin)
        answer = attempt(world.attacker(kind), statements)
        verdict = judged(answer, must_refuse=must_refuse)
        if not verdict and true_is_a_leak and any(row == (True,) for row in answer.rows):
            verdict = "answered true for another tenant's ids"
        if not verdict and tenant_world.snapshot(world.admin) != before:
            verdict = "changed rows"
        if verdict:
            failures.append(f"{name}: {verdict}")
    record(f"tally: attacks tried, {cls}", len(attacks))
    assert attacks and failures == []


def _q(name: str) -> str:
    return sql.Identifier(name).as_string(None)


SHADOW = ("CREATE TEMP TABLE agentsaga_credentials (role_name TEXT, namespace TEXT, kind TEXT)",
          ("INSERT INTO agentsaga_credentials VALUES (current_user, %s, NULL)", (B,)))
SHADOW_ROLES = ("CREATE TEMP TABLE pg_roles (oid OID, rolname NAME, rolsuper BOOLEAN)",
                "INSERT INTO pg_roles VALUES (0, current_user, true)")


def _shadowed(world: tenant_world.Credentials, kind: str, attack: Sequence[Statement | str],
              record: Record, *, roles_too: bool = False) -> str:
    """The Critical finding's session: a temporary agentsaga_credentials claiming namespace B
    with no kind (and a temporary pg_roles saying the caller is a superuser), then `attack`.
    '' when refused or harmless with every row as it was."""
    record("tally: attacks tried, the Critical finding as reported", 1)
    before = tenant_world.snapshot(world.admin)
    answer = attempt(world.attacker(kind),
                     [*SHADOW, *(SHADOW_ROLES if roles_too else ()), *attack])
    verdict = judged(answer)
    if not verdict and tenant_world.snapshot(world.admin) != before:
        verdict = "changed rows"
    return verdict


# -- the Critical finding, as reported -------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_critical_shadowed_credentials_read_another_namespaces_steps(
        world: tenant_world.Credentials, kind: str,
        record_property: Record) -> None:
    assert _shadowed(world, kind, [("SELECT * FROM saga_log WHERE run_id = %s", (VICTIM,))],
                     record_property) == ""


@pytest.mark.parametrize("kind", KINDS)
def test_critical_shadowed_credentials_rebind_another_namespaces_run(
        world: tenant_world.Credentials, kind: str,
        record_property: Record) -> None:
    assert _shadowed(world, kind, [(
        "UPDATE saga_runs SET pod_uid = 'pod-a', owner = 'pod-a', owner_epoch = owner_epoch + 1"
        " WHERE run_id = %s", (VICTIM,))], record_property) == ""


@pytest.mark.parametrize("kind", KINDS)
def test_critical_shadowed_credentials_flip_a_step_a_person_settled(
        world: tenant_world.Credentials, kind: str,
        record_property: Record) -> None:
    assert _shadowed(world, kind, [(
        "UPDATE saga_log SET status = 'CONFIRMED', external_ref = 'fake' WHERE run_id = %s"
        " AND step_idx = 1", (VICTIM,))], record_property) == ""


@pytest.mark.parametrize("kind", KINDS)
def test_critical_shadowed_credentials_mark_a_confirmed_step_compensated(
        world: tenant_world.Credentials, kind: str,
        record_property: Record) -> None:
    assert _shadowed(world, kind, [(
        "UPDATE saga_log SET status = 'COMPENSATED', comp_status = 'DONE' WHERE run_id = %s"
        " AND step_idx = 0", (VICTIM,))], record_property) == ""


@pytest.mark.parametrize("kind", KINDS)
def test_critical_shadowed_credentials_forge_a_confirmed_step_the_victims_unwind_runs(
        world: tenant_world.Credentials, kind: str,
        record_property: Record) -> None:
    """A CONFIRMED `charge` of the attacker's account in B's run, its compensation the one the
    tool declares for those arguments: B's own unwind Job would pay the attacker. Refused;
    B's unwind pays its customer back, and nobody else."""
    forged = ('{"tool": "payout", "args": {"account": "ATTACKER-ACCT", "amount": 99999}}')
    verdict = _shadowed(world, kind, [(
        "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
        " status, external_ref, compensation, writer_epoch) VALUES (%s, 3, 'charge',"
        " 'compensatable', %s, %s, 'CONFIRMED', 'ch_x', %s, 1)",
        (VICTIM, step_key(VICTIM, 3, "charge"),
         '{"account": "ATTACKER-ACCT", "amount": 99999}', forged))], record_property)
    with SagaLog(world.b_job, min_size=1, max_size=2).open(migrate=False) as log:
        unwind_run(log, tenant_world.build_registry(), VICTIM, "job", recheck_pause_s=0.01)
    assert ATTACKER not in tenant_world.PAYOUTS
    assert tenant_world.PAYOUTS == [tenant_world.CUSTOMER]
    assert verdict == ""


@pytest.mark.parametrize("kind", KINDS)
def test_critical_shadowed_credentials_plant_a_late_effect_in_an_ended_run(
        world: tenant_world.Credentials, kind: str,
        record_property: Record) -> None:
    """An observation of an effect in B's ended run would make the operator start a Job."""
    verdict = _shadowed(world, kind, [(
        "INSERT INTO saga_observations (run_id, step_idx, idempotency_key, outcome,"
        " external_ref, writer_epoch) VALUES (%s, 0, %s, 'CONFIRMED', 'fake', 1)",
        (ENDED, step_key(ENDED, 0, "wire")))], record_property)
    with SagaLog(world.operator, min_size=1, max_size=1).open(migrate=False) as operator:
        assert operator.late_effects([ENDED]) == []
    assert verdict == ""


@pytest.mark.parametrize("kind", KINDS)
def test_critical_shadowed_credentials_and_roles_move_a_proposed_correction_to_silent(
        world: tenant_world.Credentials, kind: str,
        record_property: Record) -> None:
    assert _shadowed(world, kind, [(
        "UPDATE corrections SET state = 'Silent' WHERE run_id = %s AND step_idx = 2",
        (VICTIM,))], record_property, roles_too=True) == ""


@pytest.mark.parametrize("kind", KINDS)
def test_critical_set_role_to_the_base_role_reaches_runs_outside_kubernetes(
        world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    record_property("tally: attacks tried, the Critical finding as reported", 1)
    base = roles.SIDECAR if kind == "sidecar" else roles.JOB
    answer = attempt(world.attacker(kind), [
        sql.SQL("SET ROLE {}").format(sql.Identifier(base)).as_string(None),
        ("SELECT * FROM saga_log WHERE run_id = %s", (BARE,))])
    assert answer.refused.startswith("42501"), answer
    assert judged(answer) == ""


# -- every attack class, against everything the catalog lists --------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_reads_of_other_tenants_rows(world: tenant_world.Credentials, kind: str,
                                     record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    attacks: list[Attack] = [(f"read {t}", [f"SELECT * FROM {_q(t)}"], False)
                             for t in cat.tables]
    attacks += [(f"read {t} of {run}", [(f"SELECT * FROM {_q(t)} WHERE run_id = %s", (run,))],
                 False) for t in cat.run_tables for run in VICTIM_RUNS]
    attacks += [(f"read the position of {s}", [f"SELECT last_value FROM {_q(s)}"], True)
                for s in cat.sequences]
    attacks += [("switch row-level security off", [
        "SET row_security = off", f"SELECT * FROM {_q(t)}"], True) for t in cat.run_tables]
    _run(world, kind, attacks, record_property, "reads of other tenants' rows")


def _template(world: tenant_world.Credentials, table: str, run: str) -> dict[str, Any]:
    """A row of `table` for `run` as valid as the victim's own: one of the victims' rows of
    that table, moved to step 40 (or, for a run, to a new run of the victim's namespace),
    under the key that step would have."""
    with psycopg.connect(world.admin) as conn:
        row = conn.execute(f"SELECT to_jsonb(t) FROM {_q(table)} t WHERE run_id = ANY(%s)"  # noqa: S608
                           " ORDER BY run_id = %s DESC LIMIT 1",
                           (list(VICTIM_RUNS), run)).fetchone()
    value = dict(row[0]) if row is not None else _made_up(world, table)
    namespace = B if "/" in run else ""
    value["run_id"] = f"{namespace}/planted" if table == "saga_runs" and namespace else (
        "planted" if table == "saga_runs" else run)
    if "namespace" in value:
        value["namespace"] = namespace
    if "step_idx" in value:
        value["step_idx"] = 40
    for key in ("idempotency_key", "step_key"):
        if key in value:
            value[key] = step_key(run, 40, str(value.get("tool", "charge")))
    value.pop("id", None)
    return value


_VALUES = {"text": "x", "integer": 2, "bigint": 1, "jsonb": {}, "boolean": False,
           "text[]": [], "double precision": 0.0, "timestamp with time zone": "2026-01-01"}


def _made_up(world: tenant_world.Credentials, table: str) -> dict[str, Any]:
    """A row of `table` where the victims have none: a value of its type in each column."""
    with psycopg.connect(world.admin) as conn:
        columns = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            (table,)).fetchall()
    return {str(name): _VALUES.get(str(kind)) for name, kind in columns}


@pytest.mark.parametrize("kind", KINDS)
def test_inserts_into_other_runs(world: tenant_world.Credentials, kind: str,
                                 record_property: Record) -> None:
    import json
    cat = tenant_world.catalog(world.admin)
    attacks: list[Attack] = []
    for table in cat.tables:
        if table not in cat.run_tables:
            attacks.append((f"insert into {table}", [f"INSERT INTO {_q(table)} DEFAULT VALUES"],
                            True))
            continue
        columns = tenant_world.column_privileges(world.admin, _role(kind), table, "INSERT")
        for run in VICTIM_RUNS:
            if not columns:
                attacks.append((f"insert into {table} for {run}", [(
                    f"INSERT INTO {_q(table)} (run_id) VALUES (%s)", (run,))], True))
                continue
            names = ", ".join(_q(c) for c in columns)
            attacks.append((f"insert into {table} for {run}", [(
                f"INSERT INTO {_q(table)} ({names}) SELECT {names}"  # noqa: S608
                f" FROM jsonb_populate_record(NULL::{_q(table)}, %s::jsonb)",
                (json.dumps(_template(world, table, run)),))], True))
    attacks.append(("claim namespace B in agentsaga_credentials", [(
        "INSERT INTO agentsaga_credentials VALUES (current_user || '_x', %s, 'sidecar')", (B,))],
        True))
    _run(world, kind, attacks, record_property, "inserts into other runs")


@pytest.mark.parametrize("kind", KINDS)
def test_updates_of_other_runs_and_moving_rows_out(world: tenant_world.Credentials, kind: str,
                                                   record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    attacks: list[Attack] = []
    for table in cat.tables:
        columns = tenant_world.column_privileges(world.admin, _role(kind), table, "UPDATE")
        if table not in cat.run_tables:
            column = columns[0] if columns else "ctid"
            attacks.append((f"update {table}", [
                f"UPDATE {_q(table)} SET {_q(column)} = {_q(column)}"], column == "ctid"))
            continue
        for run in VICTIM_RUNS:
            for column in columns or ["run_id"]:
                attacks.append((f"update {table}.{column} of {run}", [(
                    f"UPDATE {_q(table)} SET {_q(column)} = {_q(column)} WHERE run_id = %s",
                    (run,))], not columns))
            attacks.append((f"move the attacker's {table} rows into {run}", [(
                f"UPDATE {_q(table)} SET run_id = %s WHERE run_id = %s", (run, OWN))], True))
    attacks.append(("move the attacker's run into namespace B", [(
        "UPDATE saga_runs SET namespace = %s WHERE run_id = %s", (B, OWN))], True))
    _run(world, kind, attacks, record_property, "updates moving rows")


@pytest.mark.parametrize("kind", KINDS)
def test_deletes(world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    attacks: list[Attack] = [(f"delete from {t}", [f"DELETE FROM {_q(t)}"], True)
                             for t in cat.tables]
    attacks += [(f"delete {run} from {t}", [(f"DELETE FROM {_q(t)} WHERE run_id = %s", (run,))],
                 True) for t in cat.run_tables for run in VICTIM_RUNS]
    _run(world, kind, attacks, record_property, "deletes")


@pytest.mark.parametrize("kind", KINDS)
def test_truncate(world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    attacks: list[Attack] = [(f"truncate {t}{c}", [f"TRUNCATE {_q(t)}{c}"], True)
                             for t in cat.tables for c in ("", " CASCADE")]
    _run(world, kind, attacks, record_property, "truncate")


@pytest.mark.parametrize("kind", KINDS)
def test_copy(world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    attacks: list[Attack] = []
    for t in cat.tables:
        attacks += [(f"copy {t} out", [f"COPY {_q(t)} TO STDOUT"], False),
                    (f"copy into {t}", [f"COPY {_q(t)} FROM STDIN"], True),
                    (f"copy {t} to a server file",
                     [f"COPY {_q(t)} TO '/tmp/agentsaga-stolen'"], True),
                    (f"copy {t} to a program",
                     [f"COPY (SELECT * FROM {_q(t)}) TO PROGRAM 'cat'"], True)]
    _run(world, kind, attacks, record_property, "COPY")


@pytest.mark.parametrize("kind", KINDS)
def test_temporary_tables_shadowing_what_the_functions_read(
        world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    assert {"agentsaga_credentials", "pg_roles", "run_channel"} <= set(cat.names_read)
    attacks: list[Attack] = [(f"shadow {n}", [f"CREATE TEMP TABLE {_q(n)} (x INT)"], True)
                             for n in sorted({*cat.names_read, *cat.tables})]
    _run(world, kind, attacks, record_property, "temp-table shadowing")


@pytest.mark.parametrize("kind", KINDS)
def test_set_role_and_settings_that_switch_checks_off(
        world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    attacks: list[Attack] = []
    for role in cat.roles:
        if role == _role(kind):
            continue
        attacks += [(f"SET ROLE {role}", [f"SET ROLE {_q(role)}"], True),
                    (f"SET SESSION AUTHORIZATION {role}",
                     [f"SET SESSION AUTHORIZATION {_q(role)}"], True)]
    attacks += [("switch the triggers off", ["SET session_replication_role = replica"], True),
                ("ALTER ROLE itself", [f"ALTER ROLE {_q(_role(kind))} BYPASSRLS"], True),
                ("lift its own connection limit", [
                    f"ALTER ROLE {_q(_role(kind))} CONNECTION LIMIT -1"], True)]
    _run(world, kind, attacks, record_property, "SET ROLE and settings")


@pytest.mark.parametrize("kind", KINDS)
def test_the_migration_lock(world: tenant_world.Credentials, kind: str,
                            record_property: Record) -> None:
    attacks: list[Attack] = [
        (f"lock schema_migrations in {mode} mode",
         ["SELECT 1", f"LOCK TABLE schema_migrations IN {mode} MODE"], True)
        for mode in ("ROW SHARE", "ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE", "SHARE",
                     "SHARE ROW EXCLUSIVE", "EXCLUSIVE", "ACCESS EXCLUSIVE")]
    _run(world, kind, attacks, record_property, "migration lock")


@pytest.mark.parametrize("kind", KINDS)
def test_a_tenant_holding_locks_does_not_delay_a_migrate(world: tenant_world.Credentials,
                                                        kind: str) -> None:
    """The old advisory key and a read of schema_migrations, held in an open transaction: the
    migrate (here with a lock timeout, so that waiting fails rather than hangs) goes through."""
    with psycopg.connect(world.attacker(kind)) as tenant:
        tenant.execute("SELECT pg_advisory_lock(%s)", (0x5A6A_0001,))
        tenant.execute("SELECT * FROM schema_migrations").fetchall()
        with psycopg.connect(world.admin, autocommit=True) as admin:
            admin.execute("SET lock_timeout = '5s'")
            admin.prepare_threshold = None
            assert schema.migrate(admin) == []


@pytest.mark.parametrize("kind", KINDS)
def test_create_in_schemas(world: tenant_world.Credentials, kind: str,
                           record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    attacks: list[Attack] = []
    for s in cat.schemas:
        attacks += [(f"create a table in {s}", [f"CREATE TABLE {_q(s)}.planted (x INT)"], True),
                    (f"create a function in {s}", [
                        f"CREATE FUNCTION {_q(s)}.agentsaga_caller_kind(x INT) RETURNS TEXT"
                        " LANGUAGE sql AS 'SELECT ''sidecar'''"], True),
                    (f"create an operator in {s}", [
                        f"CREATE OPERATOR {_q(s)}.= (LEFTARG = text, RIGHTARG = text,"
                        " FUNCTION = texteq)"], True)]
    attacks += [("create a schema", ["CREATE SCHEMA planted"], True),
                ("create an extension", ["CREATE EXTENSION IF NOT EXISTS dblink"], True)]
    _run(world, kind, attacks, record_property, "CREATE in schemas")


@pytest.mark.parametrize("kind", KINDS)
def test_squatting_another_runs_key(world: tenant_world.Credentials, kind: str,
                                    record_property: Record) -> None:
    """The key B's run will need for its next step, taken first in A's own run: refused (a
    key is the one of its own run, step and tool), and B's step is written under it after."""
    registry = tenant_world.build_registry()
    attacks: list[Attack] = [
        (f"squat {run}'s key of step {idx} ({tool})", [(
            "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
            " status, writer_epoch) VALUES (%s, %s, %s, %s, %s, '{}', 'INTENDED', 1)",
            (OWN, idx, tool, registry.get(tool).cls, step_key(run, idx, tool)))], True)
        for run in VICTIM_RUNS for idx in (1, 3) for tool in ("charge", "wire")]
    _run(world, kind, attacks, record_property, "unique-key squatting")
    with SagaLog(world.b_sidecar, min_size=1, max_size=1).open(migrate=False) as log:
        assert log.record_intent(VICTIM, 1, 3, tool="charge", tool_class="compensatable",
                                 key=step_key(VICTIM, 3, "charge"), args={},
                                 compensation=None, audience=[]) is not None


@pytest.mark.parametrize("kind", KINDS)
def test_inserting_a_step_in_an_outcome_state(world: tenant_world.Credentials, kind: str,
                                              record_property: Record) -> None:
    """In the attacker's own run, under the right key: only an intent may be inserted."""
    shapes = {f"status {s}": f"'{s}', NULL, NULL" for s in StepStatus if s != "INTENDED"}
    shapes |= {"an intent with an external reference": "'INTENDED', 'ch_fake', NULL",
               "an intent whose compensation is done": "'INTENDED', NULL, 'DONE'"}
    attacks: list[Attack] = [(f"insert {shape}", [(
        "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
        f" status, external_ref, comp_status, writer_epoch) VALUES (%s, 1, 'charge',"
        f" 'compensatable', %s, '{{}}', {values}, 1)", (OWN, step_key(OWN, 1, "charge")))],
        True) for shape, values in shapes.items()]
    _run(world, kind, attacks, record_property, "inserting a step already in an outcome")


@pytest.mark.parametrize("kind", KINDS)
def test_rebinding_flipping_compensating_and_silencing(
        world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    """The Critical finding's writes without the shadow, on B's runs and on A's own."""
    attacks: list[Attack] = []
    for run in VICTIM_RUNS:
        attacks += [
            (f"re-bind {run}", [(
                "UPDATE saga_runs SET pod_uid = 'pod-a', owner = 'pod-a',"
                " owner_epoch = owner_epoch + 1 WHERE run_id = %s", (run,))], False),
            (f"flip {run}'s settled step", [(
                "UPDATE saga_log SET status = 'CONFIRMED', external_ref = 'fake'"
                " WHERE run_id = %s AND status = 'NOT_EXECUTED'", (run,))], False),
            (f"mark {run}'s confirmed steps compensated", [(
                "UPDATE saga_log SET status = 'COMPENSATED', comp_status = 'DONE'"
                " WHERE run_id = %s AND status = 'CONFIRMED'", (run,))], False),
            (f"silence {run}'s corrections", [(
                "UPDATE corrections SET state = 'Silent' WHERE run_id = %s", (run,))], False),
            (f"rewrite {run}'s settlements", [(
                "UPDATE step_settlements SET outcome = 'Happened' WHERE run_id = %s", (run,))],
             False)]
    attacks += [
        ("re-bind the attacker's own run to another pod without adopting it", [(
            "UPDATE saga_runs SET pod_uid = 'pod-z', owner = 'pod-z' WHERE run_id = %s",
            (OWN,))], True),
        ("mark the attacker's own step compensated with no compensation done", [(
            "UPDATE saga_log SET status = 'COMPENSATED' WHERE run_id = %s AND step_idx = 0",
            (OWN,))], True),
        ("record a compensation under a key of the attacker's choosing", [(
            "UPDATE saga_log SET comp_status = 'INTENDED', comp_key = %s WHERE run_id = %s"
            " AND step_idx = 0", (step_key(VICTIM, 0, "compensate:charge"), OWN))], True)]
    _run(world, kind, attacks, record_property, "re-binding, flipping, compensating, silencing")


@pytest.mark.parametrize("kind", KINDS)
def test_late_effects_in_another_namespaces_ended_run(
        world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    attacks: list[Attack] = [(f"observe an effect of {run}", [(
        "INSERT INTO saga_observations (run_id, step_idx, idempotency_key, outcome,"
        " external_ref, writer_epoch) VALUES (%s, 0, %s, 'CONFIRMED', 'fake', 1)",
        (run, step_key(run, 0, tool)))], True)
        for run, tool in ((ENDED, "wire"), (VICTIM, "charge"), (BARE, "charge"))]
    _run(world, kind, attacks, record_property, "late effects planted")
    with SagaLog(world.operator, min_size=1, max_size=1).open(migrate=False) as operator:
        assert operator.late_effects(list(VICTIM_RUNS)) == []


def _argument(kind: str, run: str) -> str:
    return {"text": sql.Literal(run).as_string(None), "integer": "0"}.get(kind, "NULL")


@pytest.mark.parametrize("kind", KINDS)
def test_every_function_called_with_another_tenants_ids(
        world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    cat = tenant_world.catalog(world.admin)
    attacks: list[Attack] = [
        (f"{name}({', '.join(types)}) on {run}", [
            f"SELECT {_q(name)}({', '.join(_argument(t, run) for t in types)})"], trigger)
        for name, types, trigger in cat.functions for run in VICTIM_RUNS]
    _run(world, kind, attacks, record_property, "functions called with another tenant's ids",
         true_is_a_leak=True)


@pytest.mark.parametrize("kind", KINDS)
def test_server_files_large_objects_and_programs(
        world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    with psycopg.connect(world.b_sidecar) as victim:
        pid = victim.info.backend_pid
        attacks: list[Attack] = [(call, [f"SELECT {call}"], True) for call in (
            "pg_read_file('/etc/hostname')", "pg_read_file('postgresql.conf')",
            "pg_read_binary_file('/etc/hostname')", "pg_ls_dir('.')", "pg_stat_file('.')",
            "lo_import('/etc/hostname')", "lo_export(0, '/tmp/agentsaga-stolen')",
            f"pg_terminate_backend({pid})", f"pg_cancel_backend({pid})", "pg_reload_conf()")]
        attacks += [
            ("copy from a program", ["COPY agentsaga_credentials FROM PROGRAM 'id'"], True),
            ("change a server setting", ["ALTER SYSTEM SET fsync = off"], True)]
        _run(world, kind, attacks, record_property, "server files, large objects, programs")
        assert victim.execute("SELECT 1").fetchone() == (1,)  # B's session lives on


@pytest.mark.parametrize("kind", KINDS)
def test_notify_is_a_hint_that_changes_no_decision(
        world: tenant_world.Credentials, kind: str, record_property: Record) -> None:
    """A tenant may NOTIFY any channel: B's sidecar waiting for its plan's decision is woken
    by A's announcement of that plan's hash, reads its run again under its own role, finds it
    undecided and keeps waiting; no row changes."""
    attacks: list[Attack] = [
        ("announce a decision of B's plan", ["NOTIFY agentsaga_decisions, 'plan-of-b'"], False),
        ("announce B's run on the old channel",
         [("SELECT pg_notify('agentsaga_runs', %s)", (VICTIM,))], False)]
    decided: list[Any] = []
    with SagaLog(world.b_sidecar, min_size=1, max_size=2).open(migrate=False) as log:
        waiter = threading.Thread(target=lambda: decided.append(
            await_decision(log, VICTIM, 3.0, recheck_s=60.0)))
        waiter.start()
        _run(world, kind, attacks, record_property, "NOTIFY")
        waiter.join(timeout=30)
    assert len(decided) == 1 and decided[0] is not None
    assert decided[0].plan_hash == "plan-of-b" and decided[0].decision == ""
