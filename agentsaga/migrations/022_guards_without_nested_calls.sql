-- The guards of a step's row without a nested function call on the path a dispatch takes. A
-- SQL function with a pinned search_path is never inlined: each call switches search_path and
-- back and plans its body again in every transaction, and an intent and its outcome each
-- called two (the caller's kind, the step's key). Both are now read in the guard's own body,
-- whose plans plpgsql keeps for the session, under the guard's pinned search_path. The check
-- that a step's other columns are written once compares the row with the writable columns
-- taken back from the old row (one record comparison), where 021 built both rows as JSON
-- (to_jsonb) at every outcome; the JSON is built only to name the columns in the denial. The
-- denials are 021's, word for word.
DO $migration$
DECLARE
    s TEXT := current_schema();
BEGIN
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION agentsaga_step_guard() RETURNS trigger LANGUAGE plpgsql
        SET search_path = pg_catalog, %1$I, pg_temp AS $body$
        DECLARE
            kind TEXT;
            kept saga_log;
            step TEXT := OLD.status || ' -> ' || NEW.status;
            resend BOOLEAN := OLD.status = 'NOT_EXECUTED' AND NEW.status = 'INTENDED';
            outcome TEXT[] := ARRAY['status', 'external_ref', 'result', 'error', 'comp_key',
                                    'comp_status', 'comp_result', 'updated_at'];
            again TEXT[] := ARRAY['compensation', 'audience', 'writer_epoch', 'deadline',
                                  'attempt', 'contract_hash', 'contract'];
            writable TEXT[] := CASE WHEN resend THEN outcome || again ELSE outcome END;
        BEGIN
            kind := (SELECT c.kind FROM agentsaga_credentials c WHERE c.role_name = current_user);
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
            -- the new row with what this update may write taken back from the old one: any
            -- other column changed makes it differ (a column added later is covered unnamed)
            kept := NEW;
            kept.status := OLD.status; kept.external_ref := OLD.external_ref;
            kept.result := OLD.result; kept.error := OLD.error; kept.comp_key := OLD.comp_key;
            kept.comp_status := OLD.comp_status; kept.comp_result := OLD.comp_result;
            kept.updated_at := OLD.updated_at;
            IF resend THEN
                kept.compensation := OLD.compensation; kept.audience := OLD.audience;
                kept.writer_epoch := OLD.writer_epoch; kept.deadline := OLD.deadline;
                kept.attempt := OLD.attempt; kept.contract_hash := OLD.contract_hash;
                kept.contract := OLD.contract;
            END IF;
            IF kept IS DISTINCT FROM OLD
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
            kind TEXT := (SELECT c.kind FROM agentsaga_credentials c WHERE c.role_name = current_user);
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
            -- agentsaga_step_key's expression, written out (a function call here costs a
            -- search_path switched twice and its body planned again in every transaction)
            IF NEW.idempotency_key IS DISTINCT FROM left(encode(sha256(convert_to(
                    NEW.run_id || ':' || NEW.step_idx::text || ':' || NEW.tool, 'UTF8')),
                    'hex'), 32) THEN
                RAISE EXCEPTION 'role %% may not insert step %%/%% under key %%: not the key of its run, step and tool',
                    current_user, NEW.run_id, NEW.step_idx, NEW.idempotency_key
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END $body$
    $fn$, s);
END $migration$;
