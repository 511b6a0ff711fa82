-- The operator is the only writer to the Kubernetes API; it learns of runs from the log.
-- `policy`: the AgentRun's spec policy (irreversibleBeforePivot, pivot.required, onOrphan, ...)
-- as the operator copied it; the sidecar reads it from here. Written by the operator's role only.
ALTER TABLE saga_runs ADD COLUMN policy JSONB;
-- `released_pod`: the uid of a pod the operator saw evicted or deleted while bound to the run.
-- BeginRun adopts a run bound to another pod only once that pod is released (R12: a run bound
-- to a live pod is not taken from it). Written by the operator's role only.
ALTER TABLE saga_runs ADD COLUMN released_pod TEXT NOT NULL DEFAULT '';
-- Every new run and every change of its owner, pod or state is announced on the channel
-- `agentsaga_runs` (payload: the run id); the operator LISTENs, and resyncs periodically too.
CREATE FUNCTION agentsaga_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('agentsaga_runs', NEW.run_id);
    RETURN NULL;
END $$;
CREATE TRIGGER saga_runs_notify AFTER INSERT OR UPDATE OF owner_epoch, pod_uid, state, pivot
    ON saga_runs FOR EACH ROW EXECUTE FUNCTION agentsaga_notify_run();
