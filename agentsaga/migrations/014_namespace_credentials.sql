-- Isolation enforced by Postgres: every agent namespace has its own credentials (a sidecar role
-- `agentsaga_ns_<ns>`, member of agentsaga_sidecar, and a Job role `agentsaga_job_<ns>`, member
-- of agentsaga_job; agentsaga/store/roles.py creates them, `agentsaga migrate --namespace`).
-- This table says which namespace each credential belongs to. Row-level security on every
-- table of the log (policies made by roles.apply, after the roles exist) lets such a
-- credential see and write only its namespace's runs; the triggers below refuse what column
-- grants cannot express: a step's arguments, compensation and binding are written once.
CREATE TABLE agentsaga_credentials (
    role_name  TEXT PRIMARY KEY,
    namespace  TEXT NOT NULL,      -- '' : runs outside Kubernetes (bare run ids)
    kind       TEXT NOT NULL CHECK (kind IN ('sidecar', 'job'))
);
-- The shared base roles, logging in themselves, are the credentials of runs outside
-- Kubernetes: they see no run of any namespace.
INSERT INTO agentsaga_credentials VALUES ('agentsaga_sidecar', '', 'sidecar'),
                                         ('agentsaga_job', '', 'job');

-- The namespace of the calling credential; NULL for a role that is not one (the operator, the
-- migration role), which the policies and triggers treat by their own rules.
CREATE FUNCTION agentsaga_caller_namespace() RETURNS TEXT LANGUAGE sql STABLE AS $$
    SELECT namespace FROM agentsaga_credentials WHERE role_name = current_user
$$;

CREATE FUNCTION agentsaga_caller_kind() RETURNS TEXT LANGUAGE sql STABLE AS $$
    SELECT kind FROM agentsaga_credentials WHERE role_name = current_user
$$;

-- Whether `run` (a saga-log run id, `namespace/run-id` or a bare id) is of the caller's
-- namespace (agentsaga.keys.log_run_id). False for a role with no namespace.
CREATE FUNCTION agentsaga_run_of_caller(run TEXT) RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
    SELECT COALESCE(CASE WHEN ns = '' THEN strpos(run, '/') = 0
                         ELSE left(run, length(ns) + 1) = ns || '/'
                              AND strpos(substr(run, length(ns) + 2), '/') = 0 END, false)
      FROM (SELECT agentsaga_caller_namespace() AS ns) caller
$$;

-- A step's row as a namespace credential may change it (the INSERT wrote the rest, and the
-- column grants keep arguments, tool, key and commit index out of reach):
--   status      only along the saga's transitions (an outcome, a reconcile, a retry of a step
--               that did not happen, a compensation), never against a person's settlement;
--   its outcome and its compensation's progress (OUTCOME below), comp_key once;
--   anything else (compensation, audience, epoch, deadline, attempt, the tool's contract)
--               only when a NOT_EXECUTED step is sent again (re_intend, a sidecar's), the
--               epoch never down. A column added later is frozen the same way.
CREATE FUNCTION agentsaga_step_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind TEXT := agentsaga_caller_kind();
    step TEXT := OLD.status || ' -> ' || NEW.status;
    resend BOOLEAN := OLD.status = 'NOT_EXECUTED' AND NEW.status = 'INTENDED';
    outcome TEXT[] := ARRAY['status', 'external_ref', 'result', 'error', 'comp_key',
                            'comp_status', 'comp_result', 'updated_at'];
    again TEXT[] := ARRAY['compensation', 'audience', 'writer_epoch', 'deadline', 'attempt',
                          'contract_hash', 'contract'];
    writable TEXT[] := CASE WHEN resend THEN outcome || again ELSE outcome END;
BEGIN
    IF kind IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status AND step NOT IN (
            'INTENDED -> CONFIRMED', 'INTENDED -> FAILED', 'INTENDED -> UNKNOWN',
            'INTENDED -> NOT_EXECUTED', 'UNKNOWN -> CONFIRMED', 'UNKNOWN -> FAILED',
            'UNKNOWN -> NOT_EXECUTED', 'NOT_EXECUTED -> INTENDED', 'NOT_EXECUTED -> CONFIRMED',
            'CONFIRMED -> COMPENSATED') THEN
        RAISE EXCEPTION 'role % may not move step %/% from %', current_user, OLD.run_id,
            OLD.step_idx, step USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- a person's "did not happen" is theirs to change: a late observation is recorded beside
    -- it (saga_observations) for them to see, it does not re-open the step
    IF step = 'NOT_EXECUTED -> CONFIRMED' AND EXISTS (
            SELECT 1 FROM step_settlements s WHERE s.run_id = OLD.run_id
               AND s.step_idx = OLD.step_idx AND s.state = 'Settled') THEN
        RAISE EXCEPTION 'role % may not override the settlement of step %/%', current_user,
            OLD.run_id, OLD.step_idx USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF kind = 'job' AND resend THEN
        RAISE EXCEPTION 'role % may not send step %/% again', current_user, OLD.run_id,
            OLD.step_idx USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (to_jsonb(NEW) - writable) IS DISTINCT FROM (to_jsonb(OLD) - writable)
       OR NEW.writer_epoch < OLD.writer_epoch
       OR (OLD.comp_key IS NOT NULL AND NEW.comp_key IS DISTINCT FROM OLD.comp_key) THEN
        RAISE EXCEPTION 'role % may not rewrite step %/% (%)', current_user, OLD.run_id,
            OLD.step_idx, (SELECT string_agg(key, ', ') FROM jsonb_each(to_jsonb(NEW) - writable) n
                            WHERE n.value IS DISTINCT FROM to_jsonb(OLD) -> n.key)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'a step''s arguments, compensation and binding are written once';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER saga_log_guard BEFORE UPDATE ON saga_log
    FOR EACH ROW EXECUTE FUNCTION agentsaga_step_guard();

-- A run's binding as a namespace credential may change it: the epoch only up (R12); a sidecar
-- binds a run to its pod only when it is bound to none, to that pod, or to a pod the operator
-- released (BeginRun); a Job unbinds it (adopt). The namespace never changes.
CREATE FUNCTION agentsaga_run_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind TEXT := agentsaga_caller_kind();
BEGIN
    IF kind IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.owner_epoch < OLD.owner_epoch OR NEW.namespace IS DISTINCT FROM OLD.namespace
       OR (NEW.pod_uid IS DISTINCT FROM OLD.pod_uid AND NOT (
               (kind = 'sidecar' AND OLD.pod_uid IN ('', OLD.released_pod))
               OR (kind = 'job' AND NEW.pod_uid = '')))
       OR ((NEW.pod_uid IS DISTINCT FROM OLD.pod_uid OR NEW.owner IS DISTINCT FROM OLD.owner)
           AND NEW.owner_epoch = OLD.owner_epoch) THEN
        RAISE EXCEPTION 'role % may not re-bind run %', current_user, OLD.run_id
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'a run is adopted by bumping its epoch, from a released pod';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER saga_runs_guard BEFORE UPDATE ON saga_runs
    FOR EACH ROW EXECUTE FUNCTION agentsaga_run_guard();

-- The Jobs' role sends approved corrections as the sidecar's does (migration 010's edges).
CREATE OR REPLACE FUNCTION agentsaga_correction_transition() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    is_sender BOOLEAN;
    is_operator BOOLEAN;
    step TEXT := OLD.state || ' -> ' || NEW.state;
BEGIN
    IF NEW.state IS NOT DISTINCT FROM OLD.state
       OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RETURN NEW;
    END IF;
    SELECT COALESCE(bool_or(r.rolname IN ('agentsaga_sidecar', 'agentsaga_job')), false),
           COALESCE(bool_or(r.rolname = 'agentsaga_operator'), false)
      INTO is_sender, is_operator
      FROM pg_roles r
     WHERE r.rolname IN ('agentsaga_sidecar', 'agentsaga_job', 'agentsaga_operator')
       AND pg_has_role(current_user, r.oid, 'MEMBER');
    IF NOT (is_sender OR is_operator)
       OR (is_sender AND step IN ('Approved -> Sending', 'Sending -> Sent'))
       OR (is_operator AND step IN ('Proposed -> Approved', 'Proposed -> Dismissed')) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'role % may not move correction %/% from %', current_user, OLD.run_id,
        OLD.step_idx, step
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'the sidecar sends approved corrections; only the operator decides them';
END
$$;
