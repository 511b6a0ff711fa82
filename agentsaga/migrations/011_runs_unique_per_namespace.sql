-- A run id is unique within its namespace, not across namespaces: a run of a Kubernetes
-- namespace is stored as `namespace/run-id` (agentsaga.keys.log_run_id), a run outside
-- Kubernetes under its bare id. Two namespaces may both run `refund-1`: two runs, under two
-- sets of keys (R3), and nothing addressed to one reaches the other.
--
-- Runs stored earlier under a bare id with a namespace are renamed, and every row naming them
-- with them (the foreign keys are dropped and made again around it; one transaction).
ALTER TABLE step_settlements DROP CONSTRAINT step_settlements_run_id_step_idx_fkey;
ALTER TABLE corrections DROP CONSTRAINT corrections_run_id_step_idx_fkey;
ALTER TABLE saga_log DROP CONSTRAINT saga_log_run_id_fkey;

CREATE FUNCTION pg_temp.agentsaga_qualified(bare TEXT) RETURNS TEXT LANGUAGE sql AS $$
    SELECT r.namespace || '/' || r.run_id FROM saga_runs r
     WHERE r.run_id = bare AND r.namespace <> '' AND strpos(r.run_id, '/') = 0
$$;
UPDATE step_settlements SET run_id = pg_temp.agentsaga_qualified(run_id)
 WHERE pg_temp.agentsaga_qualified(run_id) IS NOT NULL;
UPDATE saga_observations SET run_id = pg_temp.agentsaga_qualified(run_id)
 WHERE pg_temp.agentsaga_qualified(run_id) IS NOT NULL;
UPDATE saga_attempts SET run_id = pg_temp.agentsaga_qualified(run_id)
 WHERE pg_temp.agentsaga_qualified(run_id) IS NOT NULL;
UPDATE corrections SET run_id = pg_temp.agentsaga_qualified(run_id)
 WHERE pg_temp.agentsaga_qualified(run_id) IS NOT NULL;
UPDATE saga_log SET run_id = pg_temp.agentsaga_qualified(run_id)
 WHERE pg_temp.agentsaga_qualified(run_id) IS NOT NULL;
UPDATE saga_runs SET run_id = namespace || '/' || run_id
 WHERE namespace <> '' AND strpos(run_id, '/') = 0;
DROP FUNCTION pg_temp.agentsaga_qualified(TEXT);

ALTER TABLE saga_log ADD CONSTRAINT saga_log_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES saga_runs (run_id);
ALTER TABLE corrections ADD CONSTRAINT corrections_run_id_step_idx_fkey
    FOREIGN KEY (run_id, step_idx) REFERENCES saga_log (run_id, step_idx);
ALTER TABLE step_settlements ADD CONSTRAINT step_settlements_run_id_step_idx_fkey
    FOREIGN KEY (run_id, step_idx) REFERENCES saga_log (run_id, step_idx);

-- The id says the namespace: `namespace/run-id` with exactly one '/', or a bare id outside
-- Kubernetes.
ALTER TABLE saga_runs ADD CONSTRAINT saga_runs_id_in_namespace CHECK (
    CASE WHEN namespace = '' THEN strpos(run_id, '/') = 0
         ELSE left(run_id, length(namespace) + 1) = namespace || '/'
              AND strpos(substr(run_id, length(namespace) + 2), '/') = 0 END);

-- The run id without its namespace, for the operator's "this id is a run of another
-- namespace" condition (an AgentRun whose own namespace has no such run).
CREATE INDEX saga_runs_bare_id ON saga_runs
    ((substr(run_id, length(namespace) + CASE WHEN namespace = '' THEN 1 ELSE 2 END)));
