-- The saga log (R2, R11): one row per run, one row per side-effecting step.

CREATE TABLE saga_runs (
    run_id                     TEXT        PRIMARY KEY,
    agent                      TEXT        NOT NULL DEFAULT '',
    state                      TEXT        NOT NULL DEFAULT 'running',
        -- running | succeeded | failed | unwinding | unwound
    owner_epoch                BIGINT      NOT NULL DEFAULT 1,   -- R12 fencing token
    owner                      TEXT        NOT NULL DEFAULT '',  -- pod or job that holds the epoch
    pod_uid                    TEXT        NOT NULL DEFAULT '',
    namespace                  TEXT        NOT NULL DEFAULT '',
    irreversible_before_pivot  INT         NOT NULL DEFAULT 0,   -- R10
    pivot                      JSONB,                            -- staged plan and its decision
    trace_context              JSONB,                            -- W3C traceparent of the run
    created_at                 TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at                 TIMESTAMPTZ NOT NULL DEFAULT now(),
    ended_at                   TIMESTAMPTZ
);

CREATE TABLE saga_log (
    run_id           TEXT        NOT NULL REFERENCES saga_runs (run_id),
    step_idx         INT         NOT NULL CHECK (step_idx >= 0),
    tool             TEXT        NOT NULL,
    tool_class       TEXT        NOT NULL
        CHECK (tool_class IN ('reversible', 'compensatable', 'irreversible')),
    idempotency_key  TEXT        NOT NULL UNIQUE,
    args             JSONB       NOT NULL,
    status           TEXT        NOT NULL
        CHECK (status IN ('INTENDED', 'CONFIRMED', 'FAILED', 'UNKNOWN', 'NOT_EXECUTED',
                          'COMPENSATED')),
    external_ref     TEXT,
    result           JSONB,
    error            TEXT,
    compensation     JSONB,        -- {"tool": ..., "args": {...}}, written before the call (R6)
    audience         TEXT[]      NOT NULL DEFAULT '{}',               -- R9
    after_pivot      BOOLEAN     NOT NULL DEFAULT false,
    comp_key         TEXT,         -- R8: the compensation's own idempotency key
    comp_status      TEXT
        CHECK (comp_status IN ('INTENDED', 'DONE', 'FAILED', 'QUEUED')),
    comp_result      JSONB,
    writer_epoch     BIGINT      NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step_idx)
);

CREATE INDEX saga_log_unsettled ON saga_log (run_id) WHERE status IN ('INTENDED', 'UNKNOWN');

-- Corrections for irreversible effects (R9): never sent automatically.
CREATE TABLE corrections (
    run_id       TEXT        NOT NULL,
    step_idx     INT         NOT NULL,
    tool         TEXT        NOT NULL,
    audience     TEXT[]      NOT NULL,
    rank         INT         NOT NULL,       -- blast radius: internal first, customer last
    correction   JSONB,                      -- the pre-written correction (template, recipients)
    state        TEXT        NOT NULL DEFAULT 'Proposed'
        CHECK (state IN ('Proposed', 'Approved', 'Sent', 'Dismissed', 'Silent')),
    approver     TEXT,
    reason       TEXT,
    decided_at   TIMESTAMPTZ,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step_idx),
    FOREIGN KEY (run_id, step_idx) REFERENCES saga_log (run_id, step_idx)
);
