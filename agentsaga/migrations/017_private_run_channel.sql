-- Runs are announced (the triggers of migrations 007 and 013) with their id,
-- namespace included, and Postgres lets any role LISTEN on any channel it can name: on the
-- fixed channel `agentsaga_runs` every namespace's credential could learn the other namespaces'
-- run ids and when they changed. The announcements now go to a channel whose name is a secret
-- that only the operator's role may read (agentsaga/store/roles.py grants nobody else anything
-- on `run_channel`); a sidecar's or a Job's credential cannot name it.
CREATE TABLE run_channel (
    one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
    name TEXT NOT NULL
);
INSERT INTO run_channel (name)
    VALUES ('agentsaga_runs_' || replace(gen_random_uuid()::text, '-', ''));
-- One function serves both triggers (a run changed, a late call saw an effect: both announce
-- the run's id). It reads the name as the schema's owner (SECURITY DEFINER), with a search_path
-- of this schema then pg_temp, so a session's own temporary `run_channel` cannot stand in for it.
DO $migration$
BEGIN
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_notify_run() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %I, pg_temp AS $body$
        BEGIN
            PERFORM pg_notify((SELECT name FROM run_channel), NEW.run_id);
            RETURN NULL;
        END $body$
    $fn$, current_schema());
END $migration$;
DROP TRIGGER saga_observations_notify ON saga_observations;
CREATE TRIGGER saga_observations_notify AFTER INSERT ON saga_observations
    FOR EACH ROW WHEN (NEW.outcome = 'CONFIRMED')
    EXECUTE FUNCTION agentsaga_notify_run();
DROP FUNCTION agentsaga_notify_observation();
