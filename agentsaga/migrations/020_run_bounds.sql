-- Run creation is bounded per namespace, in Postgres, whatever process begins the runs: a
-- namespace may begin at most `runs_per_window` runs in any `window_s` seconds (a sliding
-- window over saga_runs.created_at) and hold at most `open_runs` open runs. The per-process
-- quota of a sidecar (AGENTSAGA_MAX_OPEN_RUNS) stays as a cheap first check in front of it.
--
-- The limits of a namespace are a row of run_bounds (`agentsaga migrate --namespace NS` writes
-- it: agentsaga/store/roles.py); a namespace without a row has the row of namespace '*', the
-- defaults. Runs outside Kubernetes (namespace '') are bounded only by a row of their own.
-- Nobody but the schema's owner writes run_bounds, and the counts are of saga_runs itself:
-- a tenant's credential neither deletes runs nor sets their created_at (its grants), so it
-- cannot reset what it has begun.
CREATE TABLE run_bounds (
    namespace        TEXT PRIMARY KEY,           -- '*': every namespace without a row
    runs_per_window  INT  NOT NULL CHECK (runs_per_window > 0),
    window_s         INT  NOT NULL CHECK (window_s > 0),
    open_runs        INT  NOT NULL CHECK (open_runs > 0)
);
INSERT INTO run_bounds VALUES ('*', 300, 60, 500);

-- One row per namespace that has begun a run: BeginRun of a namespace takes its row's lock, so
-- that two transactions counting at once cannot both take the last slot. Only the schema's
-- owner (the function below) reads or locks it.
CREATE TABLE run_bound_locks (
    namespace TEXT PRIMARY KEY
);

CREATE INDEX saga_runs_begun ON saga_runs (namespace, created_at);
CREATE INDEX saga_runs_open_by_namespace ON saga_runs (namespace)
    WHERE state IN ('running', 'awaiting_approval', 'committing');

-- BEFORE INSERT on saga_runs: refuses a run beyond its namespace's bounds with SQLSTATE AS429
-- (the project's own code: nothing else raises it), the message saying which bound and when to retry, and the DETAIL
-- holding the seconds to wait (agentsaga/store/runs.py reads it). As the schema's owner
-- (SECURITY DEFINER: it reads every run of the namespace and locks a row no tenant may), with
-- a pinned search_path. Exempt are only sessions positively known to be the schema's
-- maintenance: a superuser's or the owner's own login (bulk loads, the benchmark); any other
-- caller, whatever it claims, is bounded. The run's created_at is the clock's, not the
-- transaction's start: a transaction held open cannot backdate what it begins. Inserting a run
-- that exists already (BeginRun adopting it: ON CONFLICT DO NOTHING) begins nothing and is not
-- counted.
DO $migration$
BEGIN
    EXECUTE format($fn$
        CREATE FUNCTION agentsaga_bound_run_creation() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, %I, pg_temp AS $body$
        DECLARE
            bound run_bounds%%ROWTYPE;
            begun INT;
            open_now INT;
            oldest TIMESTAMPTZ;
            wait_s INT;
            maintenance BOOLEAN;
        BEGIN
            SELECT COALESCE(r.rolsuper, false)
                   OR r.oid = (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID)
              INTO maintenance
              FROM pg_catalog.pg_roles r WHERE r.rolname = session_user;
            IF maintenance IS TRUE THEN
                RETURN NEW;
            END IF;
            NEW.created_at := clock_timestamp();
            IF EXISTS (SELECT 1 FROM saga_runs s WHERE s.run_id = NEW.run_id) THEN
                RETURN NEW;
            END IF;
            SELECT * INTO bound FROM run_bounds b
             WHERE b.namespace = NEW.namespace
                OR (b.namespace = '*' AND NEW.namespace <> '')
             ORDER BY b.namespace = '*' LIMIT 1;
            IF NOT FOUND THEN
                RETURN NEW;
            END IF;
            INSERT INTO run_bound_locks (namespace) VALUES (NEW.namespace)
                ON CONFLICT (namespace) DO NOTHING;
            PERFORM 1 FROM run_bound_locks l WHERE l.namespace = NEW.namespace FOR UPDATE;
            SELECT count(*), min(w.created_at) INTO begun, oldest FROM (
                SELECT s.created_at FROM saga_runs s
                 WHERE s.namespace = NEW.namespace
                   AND s.created_at > clock_timestamp() - make_interval(secs => bound.window_s)
                 ORDER BY s.created_at LIMIT bound.runs_per_window) w;
            IF begun >= bound.runs_per_window THEN
                wait_s := GREATEST(1, ceil(extract(epoch FROM
                    oldest + make_interval(secs => bound.window_s) - clock_timestamp()))::int);
                RAISE EXCEPTION 'namespace %% began %% runs in the last %% s, its limit; run %% was not begun: retry after %% s',
                    quote_literal(NEW.namespace), begun, bound.window_s,
                    quote_literal(NEW.run_id), wait_s
                    USING ERRCODE = 'AS429', DETAIL = wait_s::text,
                          HINT = 'the limit is the namespace''s row of run_bounds (agentsaga migrate --namespace NS --runs-per-window N --run-window-s S)';
            END IF;
            SELECT count(*) INTO open_now FROM (
                SELECT 1 FROM saga_runs s
                 WHERE s.namespace = NEW.namespace
                   AND s.state IN ('running', 'awaiting_approval', 'committing')
                 LIMIT bound.open_runs) o;
            IF open_now >= bound.open_runs THEN
                wait_s := LEAST(bound.window_s, 30);
                RAISE EXCEPTION 'namespace %% holds %% open runs, its limit; run %% was not begun: end a run, then retry after %% s',
                    quote_literal(NEW.namespace), open_now, quote_literal(NEW.run_id), wait_s
                    USING ERRCODE = 'AS429', DETAIL = wait_s::text,
                          HINT = 'the limit is the namespace''s row of run_bounds (agentsaga migrate --namespace NS --max-open-runs N)';
            END IF;
            RETURN NEW;
        END $body$
    $fn$, current_schema());
END $migration$;
REVOKE ALL ON FUNCTION agentsaga_bound_run_creation() FROM PUBLIC;
CREATE TRIGGER saga_runs_bounded BEFORE INSERT ON saga_runs
    FOR EACH ROW EXECUTE FUNCTION agentsaga_bound_run_creation();
