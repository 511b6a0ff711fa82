-- Steps only a human can settle (a tool with no lookup whose outcome is unknown), and what the
-- human said. One row per step: 'Waiting' when reconcile or dispatch hands the step to a human,
-- 'Settled' once a person recorded whether its effect happened (`agentsaga settle`, or
-- status.settlements through the operator). The settlement and the step's new status are written
-- in one transaction; a second identical settlement changes nothing.
CREATE TABLE step_settlements (
    run_id       TEXT        NOT NULL,
    step_idx     INT         NOT NULL,
    step_key     TEXT        NOT NULL,
    state        TEXT        NOT NULL DEFAULT 'Waiting'
        CHECK (state IN ('Waiting', 'Settled')),
    why          TEXT        NOT NULL DEFAULT '',   -- why no lookup can settle it
    outcome      TEXT
        CHECK (outcome IN ('Happened', 'NotHappened')),
    external_ref TEXT,
    settler      TEXT,
    reason       TEXT,
    asked_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    settled_at   TIMESTAMPTZ,
    PRIMARY KEY (run_id, step_idx),
    FOREIGN KEY (run_id, step_idx) REFERENCES saga_log (run_id, step_idx),
    CHECK ((state = 'Settled') = (outcome IS NOT NULL AND settler IS NOT NULL))
);
CREATE INDEX step_settlements_waiting ON step_settlements (run_id) WHERE state = 'Waiting';
