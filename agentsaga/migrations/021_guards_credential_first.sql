-- The guards of a step's row, checked in the order that costs a credential least: the calling
-- credential's kind is read first (one lookup), and only a role that is no credential is asked
-- whether it is the migration role or the operator's (a catalog lookup and a membership test
-- each), where migration 018 asked every caller all three. Every dispatch of a namespace's
-- sidecar inserts an intent and updates it with its outcome: 3 function calls fewer per
-- dispatch. The denials are 018's, word for word; a role that is at once a credential and a
-- member of the migration role is held to the credential's rules (018 exempted it).
DO $migration$
DECLARE
    s TEXT := current_schema();
BEGIN
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
            kind := agentsaga_caller_kind();
            IF kind IS NULL THEN
                IF agentsaga_caller_is_owner() OR agentsaga_caller_is_operator() THEN
                    RETURN NEW;
                END IF;
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

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_step_insert_guard() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, %1$I, pg_temp AS $body$
        DECLARE
            kind TEXT := agentsaga_caller_kind();
        BEGIN
            IF kind IS NULL AND agentsaga_caller_is_owner() THEN
                RETURN NEW;
            END IF;
            IF kind IS DISTINCT FROM 'sidecar' THEN
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
END $migration$;
