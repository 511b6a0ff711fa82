-- The tenant boundary by construction (docs/security.md, the hostile-tenant suite in
-- tests/security/):
--
-- * Every function of the schema pins its names: `SET search_path = pg_catalog, <schema>,
--   pg_temp`. A session's temporary table named `agentsaga_credentials` or `pg_roles` no longer
--   stands in for the real one (pg_temp is searched first for relations unless named later),
--   and no schema where a tenant may CREATE comes before the schema's own. The schema is the
--   one the migrations run in (current_schema()), hence format().
-- * A missing fact denies: the triggers exempt the migration role (a member of the owner of
--   `schema_migrations`, or a superuser) and the operator's role by name, positively; any
--   other role must be a credential recorded in `agentsaga_credentials`, or it is refused.
-- * A tenant inserts only intents (status INTENDED, no outcome, no compensation progress),
--   under the key derived from the row's own run, step and tool (agentsaga.keys.step_key:
--   the first 32 hex digits of sha256("<run_id>:<step_idx>:<tool>"), run_id being the
--   saga-log id), and records a compensation only under its derived key (tool
--   "compensate:<tool>"); a step is marked COMPENSATED only once its compensation is DONE.
-- * An idempotency key is unique within its run, not across namespaces (a global UNIQUE told
--   any namespace which steps another ran and let it squat a key another run would need).
DO $migration$
DECLARE
    s TEXT := current_schema();
BEGIN
    -- agentsaga.keys.step_key in SQL
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_step_key(run TEXT, idx INT, tool TEXT)
        RETURNS TEXT LANGUAGE sql IMMUTABLE STRICT
        SET search_path = pg_catalog, %1$I, pg_temp AS $body$
            SELECT left(encode(sha256(convert_to(run || ':' || idx::text || ':' || tool,
                                                  'UTF8')), 'hex'), 32)
        $body$
    $fn$, s);

    -- the migration role: a member of the schema's owner (the owner of schema_migrations,
    -- which `agentsaga migrate` creates), or a superuser (pg_has_role says true for one)
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_caller_is_owner() RETURNS BOOLEAN
        LANGUAGE sql STABLE SET search_path = pg_catalog, %1$I, pg_temp AS $body$
            SELECT COALESCE(pg_has_role(current_user, c.relowner, 'USAGE'), false)
              FROM pg_class c
             WHERE c.oid = %2$L::regclass
        $body$
    $fn$, s, format('%I.schema_migrations', s));

    -- the operator's role (or a member of it); false where the role does not exist
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_caller_is_operator() RETURNS BOOLEAN
        LANGUAGE sql STABLE SET search_path = pg_catalog, %1$I, pg_temp AS $body$
            SELECT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = 'agentsaga_operator'
                              AND pg_has_role(current_user, r.oid, 'USAGE'))
        $body$
    $fn$, s);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_caller_namespace() RETURNS TEXT
        LANGUAGE sql STABLE SET search_path = pg_catalog, %1$I, pg_temp AS $body$
            SELECT namespace FROM agentsaga_credentials WHERE role_name = current_user
        $body$
    $fn$, s);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_caller_kind() RETURNS TEXT
        LANGUAGE sql STABLE SET search_path = pg_catalog, %1$I, pg_temp AS $body$
            SELECT kind FROM agentsaga_credentials WHERE role_name = current_user
        $body$
    $fn$, s);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_run_of_caller(run TEXT) RETURNS BOOLEAN
        LANGUAGE sql STABLE SET search_path = pg_catalog, %1$I, pg_temp AS $body$
            SELECT COALESCE(CASE WHEN ns = '' THEN strpos(run, '/') = 0
                                 ELSE left(run, length(ns) + 1) = ns || '/'
                                      AND strpos(substr(run, length(ns) + 2), '/') = 0 END,
                            false)
              FROM (SELECT agentsaga_caller_namespace() AS ns) caller
        $body$
    $fn$, s);

    -- migration 014's guard of a step's row, for a credential; a role that is neither the
    -- migration role, the operator's nor a recorded credential is refused
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_step_guard() RETURNS trigger LANGUAGE plpgsql
        SET search_path = pg_catalog, %1$I, pg_temp AS $body$
        DECLARE
            kind TEXT;
            step TEXT := OLD.status || ' -> ' || NEW.status;
            resend BOOLEAN := OLD.status = 'NOT_EXECUTED' AND NEW.status = 'INTENDED';
            outcome TEXT[] := ARRAY['status', 'external_ref', 'result', 'error', 'comp_key',
                                    'comp_status', 'comp_result', 'updated_at'];
            again TEXT[] := ARRAY['compensation', 'audience', 'writer_epoch', 'deadline',
                                  'attempt', 'contract_hash', 'contract'];
            writable TEXT[] := CASE WHEN resend THEN outcome || again ELSE outcome END;
        BEGIN
            IF agentsaga_caller_is_owner() OR agentsaga_caller_is_operator() THEN
                RETURN NEW;
            END IF;
            kind := agentsaga_caller_kind();
            IF kind IS NULL THEN
                RAISE EXCEPTION 'role %% is no credential of the saga log and may not change step %%/%%',
                    current_user, OLD.run_id, OLD.step_idx
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = 'agentsaga migrate --namespace NS provisions credentials';
            END IF;
            IF NEW.status IS DISTINCT FROM OLD.status AND step NOT IN (
                    'INTENDED -> CONFIRMED', 'INTENDED -> FAILED', 'INTENDED -> UNKNOWN',
                    'INTENDED -> NOT_EXECUTED', 'UNKNOWN -> CONFIRMED', 'UNKNOWN -> FAILED',
                    'UNKNOWN -> NOT_EXECUTED', 'NOT_EXECUTED -> INTENDED',
                    'NOT_EXECUTED -> CONFIRMED', 'CONFIRMED -> COMPENSATED') THEN
                RAISE EXCEPTION 'role %% may not move step %%/%% from %%', current_user,
                    OLD.run_id, OLD.step_idx, step USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF step = 'NOT_EXECUTED -> CONFIRMED' AND EXISTS (
                    SELECT 1 FROM step_settlements s WHERE s.run_id = OLD.run_id
                       AND s.step_idx = OLD.step_idx AND s.state = 'Settled') THEN
                RAISE EXCEPTION 'role %% may not override the settlement of step %%/%%',
                    current_user, OLD.run_id, OLD.step_idx
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF kind = 'job' AND resend THEN
                RAISE EXCEPTION 'role %% may not send step %%/%% again', current_user,
                    OLD.run_id, OLD.step_idx USING ERRCODE = 'insufficient_privilege';
            END IF;
            -- a compensation runs under its own derived key, and is done before its step is
            -- marked undone
            IF NEW.comp_key IS DISTINCT FROM OLD.comp_key AND NEW.comp_key IS DISTINCT FROM
                    agentsaga_step_key(OLD.run_id, OLD.step_idx, 'compensate:' || OLD.tool) THEN
                RAISE EXCEPTION 'role %% may not record compensation key %% for step %%/%%',
                    current_user, NEW.comp_key, OLD.run_id, OLD.step_idx
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = 'a compensation''s key is derived from its run, step and tool';
            END IF;
            IF step = 'CONFIRMED -> COMPENSATED' AND (NEW.comp_status IS DISTINCT FROM 'DONE'
                    OR NEW.comp_key IS NULL) THEN
                RAISE EXCEPTION 'role %% may not mark step %%/%% compensated before its compensation is done',
                    current_user, OLD.run_id, OLD.step_idx
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF (to_jsonb(NEW) - writable) IS DISTINCT FROM (to_jsonb(OLD) - writable)
               OR NEW.writer_epoch < OLD.writer_epoch
               OR (OLD.comp_key IS NOT NULL AND NEW.comp_key IS DISTINCT FROM OLD.comp_key) THEN
                RAISE EXCEPTION 'role %% may not rewrite step %%/%% (%%)', current_user,
                    OLD.run_id, OLD.step_idx,
                    (SELECT string_agg(key, ', ') FROM jsonb_each(to_jsonb(NEW) - writable) n
                      WHERE n.value IS DISTINCT FROM to_jsonb(OLD) -> n.key)
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = 'a step''s arguments, compensation and binding are written once';
            END IF;
            RETURN NEW;
        END $body$
    $fn$, s);

    -- a credential inserts intents only, under the key of the row's own run, step and tool
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_step_insert_guard() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, %1$I, pg_temp AS $body$
        BEGIN
            IF agentsaga_caller_is_owner() THEN
                RETURN NEW;
            END IF;
            IF agentsaga_caller_kind() IS DISTINCT FROM 'sidecar' THEN
                RAISE EXCEPTION 'role %% may not write intents (step %%/%%)', current_user,
                    NEW.run_id, NEW.step_idx USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF NEW.status IS DISTINCT FROM 'INTENDED' OR NEW.external_ref IS NOT NULL
               OR NEW.result IS NOT NULL OR NEW.error IS NOT NULL OR NEW.comp_key IS NOT NULL
               OR NEW.comp_status IS NOT NULL OR NEW.comp_result IS NOT NULL
               OR NEW.attempt <> 1 THEN
                RAISE EXCEPTION 'role %% may insert step %%/%% only as an intent (status INTENDED, no outcome), not %%',
                    current_user, NEW.run_id, NEW.step_idx, NEW.status
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = 'a step''s outcome is written by updating its intent';
            END IF;
            IF NEW.idempotency_key IS DISTINCT FROM
                    agentsaga_step_key(NEW.run_id, NEW.step_idx, NEW.tool) THEN
                RAISE EXCEPTION 'role %% may not insert step %%/%% under key %%: not the key of its run, step and tool',
                    current_user, NEW.run_id, NEW.step_idx, NEW.idempotency_key
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END $body$
    $fn$, s);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_run_guard() RETURNS trigger LANGUAGE plpgsql
        SET search_path = pg_catalog, %1$I, pg_temp AS $body$
        DECLARE
            kind TEXT;
        BEGIN
            IF agentsaga_caller_is_owner() OR agentsaga_caller_is_operator() THEN
                RETURN NEW;
            END IF;
            kind := agentsaga_caller_kind();
            IF kind IS NULL THEN
                RAISE EXCEPTION 'role %% is no credential of the saga log and may not change run %%',
                    current_user, OLD.run_id USING ERRCODE = 'insufficient_privilege',
                    HINT = 'agentsaga migrate --namespace NS provisions credentials';
            END IF;
            IF NEW.owner_epoch < OLD.owner_epoch OR NEW.namespace IS DISTINCT FROM OLD.namespace
               OR (NEW.pod_uid IS DISTINCT FROM OLD.pod_uid AND NOT (
                       (kind = 'sidecar' AND OLD.pod_uid IN ('', OLD.released_pod))
                       OR (kind = 'job' AND NEW.pod_uid = '')))
               OR ((NEW.pod_uid IS DISTINCT FROM OLD.pod_uid
                    OR NEW.owner IS DISTINCT FROM OLD.owner)
                   AND NEW.owner_epoch = OLD.owner_epoch) THEN
                RAISE EXCEPTION 'role %% may not re-bind run %%', current_user, OLD.run_id
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = 'a run is adopted by bumping its epoch, from a released pod';
            END IF;
            RETURN NEW;
        END $body$
    $fn$, s);

    -- migrations 010 and 014's edges; the migration role is not restricted, a role that is
    -- none of the three is refused
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_correction_transition() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, %1$I, pg_temp AS $body$
        DECLARE
            is_sender BOOLEAN;
            is_operator BOOLEAN;
            step TEXT := OLD.state || ' -> ' || NEW.state;
        BEGIN
            IF NEW.state IS NOT DISTINCT FROM OLD.state OR agentsaga_caller_is_owner() THEN
                RETURN NEW;
            END IF;
            SELECT COALESCE(bool_or(r.rolname IN ('agentsaga_sidecar', 'agentsaga_job')), false),
                   COALESCE(bool_or(r.rolname = 'agentsaga_operator'), false)
              INTO is_sender, is_operator
              FROM pg_roles r
             WHERE r.rolname IN ('agentsaga_sidecar', 'agentsaga_job', 'agentsaga_operator')
               AND pg_has_role(current_user, r.oid, 'USAGE');
            is_sender := is_sender AND agentsaga_caller_kind() IS NOT NULL;
            IF (is_sender AND step IN ('Approved -> Sending', 'Sending -> Sent'))
               OR (is_operator AND step IN ('Proposed -> Approved', 'Proposed -> Dismissed')) THEN
                RETURN NEW;
            END IF;
            RAISE EXCEPTION 'role %% may not move correction %%/%% from %%', current_user,
                OLD.run_id, OLD.step_idx, step
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'the sidecar sends approved corrections; only the operator decides them';
        END $body$
    $fn$, s);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_notify_run() RETURNS trigger LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS $body$
        BEGIN
            PERFORM pg_notify((SELECT name FROM run_channel), NEW.run_id);
            RETURN NULL;
        END $body$
    $fn$, s);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_notify_decision() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, %1$I, pg_temp AS $body$
        BEGIN
            PERFORM pg_notify('agentsaga_decisions',
                              COALESCE(NEW.pivot_decision->>'planHash', ''));
            RETURN NULL;
        END $body$
    $fn$, s);
END $migration$;

CREATE TRIGGER saga_log_insert_guard BEFORE INSERT ON saga_log
    FOR EACH ROW EXECUTE FUNCTION agentsaga_step_insert_guard();

ALTER TABLE saga_log DROP CONSTRAINT saga_log_idempotency_key_key;
ALTER TABLE saga_log ADD CONSTRAINT saga_log_key_in_run UNIQUE (run_id, idempotency_key);
-- lookups by key alone (reconcile, observations, `step_by_key`) stay one index probe
CREATE INDEX saga_log_key ON saga_log (idempotency_key);
