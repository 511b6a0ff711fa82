-- The operator's binding rounds (agentsaga/store/open_runs.py) read the runs of a namespace
-- changed in the last seconds, and walk the open ones in id order: these indexes keep both
-- proportional to what they return, not to the runs the log holds (ended runs stay until
-- `agentsaga prune` removes them). saga_runs changes only when a run begins, is adopted, is
-- decided or ends, so neither index costs a dispatch anything.
CREATE INDEX saga_runs_changed ON saga_runs (updated_at) WHERE namespace <> '';
CREATE INDEX saga_runs_open ON saga_runs (run_id) WHERE ended_at IS NULL AND namespace <> '';
