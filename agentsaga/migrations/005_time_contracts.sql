-- R7: each step's time contract, from Postgres's clock; every attempt of a step as it was sent;
-- and what a call saw when it returned too late to write its outcome.

-- The INTENDED row's deadline (now() + the tool's call_timeout_s), and the contract's other two
-- bounds, so that "certain at" is computed by the database's clock alone.
ALTER TABLE saga_log
    ADD COLUMN deadline          TIMESTAMPTZ,
    ADD COLUMN visible_within_s  DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN dedupes_for_s     DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN attempt           INT              NOT NULL DEFAULT 1;

-- A step re-sent after it was settled NOT_EXECUTED: the row keeps the arguments first sent;
-- each later attempt is here, with the arguments it was sent with.
CREATE TABLE saga_attempts (
    run_id      TEXT        NOT NULL,
    step_idx    INT         NOT NULL,
    attempt     INT         NOT NULL CHECK (attempt >= 2),
    args        JSONB       NOT NULL,
    deadline    TIMESTAMPTZ NOT NULL,
    writer_epoch BIGINT     NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step_idx, attempt)
);

-- Append-only, never fenced: a call that returned after its writer was fenced, or after its
-- row was settled by someone else, records what the real system told it.
CREATE TABLE saga_observations (
    id               BIGSERIAL   PRIMARY KEY,
    run_id           TEXT        NOT NULL,
    step_idx         INT         NOT NULL,
    idempotency_key  TEXT        NOT NULL,
    outcome          TEXT        NOT NULL CHECK (outcome IN ('CONFIRMED', 'FAILED', 'UNKNOWN')),
    external_ref     TEXT,
    result           JSONB,
    error            TEXT,
    writer_epoch     BIGINT      NOT NULL,
    observed_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX saga_observations_step ON saga_observations (run_id, step_idx);
