-- What a person approves is what runs (R10): a staged plan does not change in the saga log.
-- The plan (`saga_runs.pivot`: the steps done, the commit steps with their shown arguments and
-- digests, the planHash, the run's digest key, stagedAt) is written by the role that stages
-- it, a sidecar's credential (or the schema's owner, which a development install's sidecar
-- uses), and then by no one:
--   - any other role (the operator's, a Job's, a role that is none of these) may not write it;
--   - a staged plan is never changed nor removed, not even by the role that staged it, while
--     a decision on it may still come: an undecided plan is replaced only after its approval
--     time-to-live (the run's policy `pivot.approvalTtlSeconds`, which the operator copies
--     from the AgentRun; one day when it has none) has passed, and a decided plan never;
--   - stagedAt is the database's clock at the staging, whatever the writer sent, so no writer
--     can make a plan look younger than it is (an approval of an old plan is refused).
-- Staging the same plan again (a restarted agent) writes nothing (agentsaga.saga.pivot.stage).
-- The caller is known only positively: a sidecar credential by its row in
-- agentsaga_credentials, the owner by membership in the table's owning role, a superuser by
-- pg_roles; anyone else is refused. Names are resolved in pg_catalog and this schema only,
-- pg_temp last, so a temporary table cannot stand in for agentsaga_credentials or pg_roles.
DO $migration$
BEGIN
    EXECUTE format($fn$
        CREATE FUNCTION agentsaga_plan_guard() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, %I, pg_temp AS $body$
        DECLARE
            stager BOOLEAN;
            ttl DOUBLE PRECISION;
            staged_at TIMESTAMPTZ;
            decided BOOLEAN;
        BEGIN
            IF TG_OP = 'UPDATE' THEN
                IF NEW.pivot IS NOT DISTINCT FROM OLD.pivot THEN
                    RETURN NEW;
                END IF;
            ELSIF NEW.pivot IS NULL THEN
                RETURN NEW;
            END IF;
            stager := EXISTS (SELECT 1 FROM agentsaga_credentials c
                               WHERE c.role_name = current_user AND c.kind = 'sidecar')
                   OR EXISTS (SELECT 1 FROM pg_roles r
                               WHERE r.rolname = current_user AND r.rolsuper)
                   OR pg_has_role(current_user,
                                  (SELECT t.relowner FROM pg_class t WHERE t.oid = TG_RELID),
                                  'MEMBER');
            IF stager IS NOT TRUE THEN
                RAISE EXCEPTION 'role %% may not stage or change the plan of run %%', current_user,
                    NEW.run_id USING ERRCODE = 'insufficient_privilege',
                    HINT = 'only the run''s sidecar stages its plan';
            END IF;
            IF NEW.pivot IS NULL THEN
                RAISE EXCEPTION 'the staged plan of run %% cannot be removed', NEW.run_id
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF TG_OP = 'UPDATE' AND OLD.pivot IS NOT NULL THEN
                decided := OLD.pivot_decision IS NOT NULL
                    AND OLD.pivot_decision->>'planHash' IS NOT DISTINCT FROM
                        OLD.pivot->>'planHash';
                IF decided THEN
                    RAISE EXCEPTION 'the plan of run %% was decided; it cannot be changed',
                        OLD.run_id USING ERRCODE = 'insufficient_privilege',
                        HINT = 'a run has a single pivot';
                END IF;
                BEGIN
                    ttl := (OLD.policy->'pivot'->>'approvalTtlSeconds')::double precision;
                EXCEPTION WHEN others THEN
                    ttl := NULL;
                END;
                IF ttl IS NULL OR ttl < 0 THEN
                    ttl := 86400;
                END IF;
                BEGIN
                    staged_at := (OLD.pivot->>'stagedAt')::timestamptz;
                EXCEPTION WHEN others THEN
                    staged_at := NULL;
                END;
                IF staged_at IS NOT NULL
                   AND staged_at + make_interval(secs => ttl) >= statement_timestamp() THEN
                    RAISE EXCEPTION 'the plan of run %% is staged and awaits a decision until %%; '
                        'it cannot be changed', OLD.run_id,
                        staged_at + make_interval(secs => ttl)
                        USING ERRCODE = 'insufficient_privilege',
                        HINT = 'what a person approves is what runs: a staged plan is replaced '
                               'only after its approval time-to-live has passed undecided';
                END IF;
            END IF;
            NEW.pivot := jsonb_set(NEW.pivot, '{stagedAt}', to_jsonb(to_char(
                statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')));
            RETURN NEW;
        END $body$
    $fn$, current_schema());
END $migration$;
CREATE TRIGGER saga_runs_plan_guard BEFORE INSERT OR UPDATE OF pivot ON saga_runs
    FOR EACH ROW EXECUTE FUNCTION agentsaga_plan_guard();
