-- A waiting sidecar learns of a pivot decision as it is recorded, not by polling the log: every
-- write of `pivot_decision` (the operator's role only) is announced on the channel
-- `agentsaga_decisions` (agentsaga/store/decisions.py). Any role may LISTEN on any channel, so
-- the payload is only the decided plan's hash: it names neither the run nor its namespace, and
-- its commit steps enter it by their digests under the run's secret key (argsDigest), so it
-- tells nothing to whoever does not hold that plan already. A woken sidecar reads the decision itself, under its own
-- role and row-level security.
CREATE FUNCTION agentsaga_notify_decision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('agentsaga_decisions', COALESCE(NEW.pivot_decision->>'planHash', ''));
    RETURN NULL;
END $$;
CREATE TRIGGER saga_runs_decision_notify AFTER UPDATE OF pivot_decision ON saga_runs
    FOR EACH ROW WHEN (NEW.pivot_decision IS DISTINCT FROM OLD.pivot_decision)
    EXECUTE FUNCTION agentsaga_notify_decision();
