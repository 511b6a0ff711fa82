-- Retention (`agentsaga prune`): ended runs are found by when they ended, oldest first, without
-- reading the runs that are still open. Every statement of a dispatch is per run (the primary
-- keys and the partial unsettled index), so a log full of ended runs does not slow it down.
CREATE INDEX IF NOT EXISTS saga_runs_ended_at ON saga_runs (ended_at) WHERE ended_at IS NOT NULL;
