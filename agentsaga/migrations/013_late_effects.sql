-- A call that came back with its effect after its step was settled NOT_EXECUTED (it outlived
-- its tool's declared deadline) records what it saw in saga_observations. The step is re-opened
-- and compensated by the next reconcile or unwind of its run; when the run has ended already,
-- nothing would run one. So a CONFIRMED observation is announced on `agentsaga_runs` (payload:
-- the run id), which the operator LISTENs to (operator/late_effects.py), and the operator's
-- sweep of such runs reads this index, proportional to the observations that saw an effect.
CREATE FUNCTION agentsaga_notify_observation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('agentsaga_runs', NEW.run_id);
    RETURN NULL;
END $$;
CREATE TRIGGER saga_observations_notify AFTER INSERT ON saga_observations
    FOR EACH ROW WHEN (NEW.outcome = 'CONFIRMED')
    EXECUTE FUNCTION agentsaga_notify_observation();
CREATE INDEX saga_observations_effects ON saga_observations (run_id) WHERE outcome = 'CONFIRMED';
