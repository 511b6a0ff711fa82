"""The store: every SQL statement that touches the saga log lives in this package.

    SagaLog          the log of one database (runs, steps, corrections, counts, waits,
                     settlements)
    records          Run, Step, PivotRecord, Correction, Adoption
    settlements      Settlement: steps handed to a human, and what the human said
    schema           the numbered migrations; a read-only command's check that they are applied
    fencing          R12: the owner-epoch check of every write
    group_commit     outcomes of concurrent dispatches written in one statement, each answered
                     once its own row is committed (`AGENTSAGA_OUTCOME_COMMIT=group`)
    hooks            StoreHooks: who hears of outcomes, compensations, corrections
    decisions        pivot decisions announced as they are recorded (LISTEN), for the waits
    provisioning     databases for the benchmark and the bulk rows it reconciles
    retention        `agentsaga prune`: ended runs removed once older than a cutoff

Nothing outside this package runs a statement; psycopg is imported elsewhere only to open
pools. The store raises the project's errors (`LogUnavailable`, `Fenced`, `RunNotFound`, ...).
"""

from agentsaga.store.hooks import NoHooks, StoreHooks
from agentsaga.store.records import Adoption, Correction, PivotRecord, Run, Step
from agentsaga.store.saga_log import SagaLog
from agentsaga.store.settlements import Settled, Settlement

__all__ = ["Adoption", "Correction", "NoHooks", "PivotRecord", "Run", "SagaLog", "Settled",
           "Settlement", "Step", "StoreHooks"]
