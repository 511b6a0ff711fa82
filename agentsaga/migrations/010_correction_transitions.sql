-- Who may move a correction from which state to which, enforced in Postgres (column grants
-- alone let the sidecar's role write any state):
--   agentsaga_sidecar   Approved -> Sending -> Sent (it sends what a person approved)
--   agentsaga_operator  Proposed -> Approved | Dismissed (a person's decision)
-- A role that is neither (the migration role, a DBA, a superuser) is not restricted. Anything
-- else (Sent -> Approved would send it again; Proposed -> Silent would skip the person) is
-- refused with insufficient_privilege. Roles that do not exist grant nothing.
CREATE FUNCTION agentsaga_correction_transition() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    is_sidecar BOOLEAN;
    is_operator BOOLEAN;
    step TEXT := OLD.state || ' -> ' || NEW.state;
BEGIN
    IF NEW.state IS NOT DISTINCT FROM OLD.state
       OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RETURN NEW;
    END IF;
    SELECT COALESCE(bool_or(r.rolname = 'agentsaga_sidecar'), false),
           COALESCE(bool_or(r.rolname = 'agentsaga_operator'), false)
      INTO is_sidecar, is_operator
      FROM pg_roles r
     WHERE r.rolname IN ('agentsaga_sidecar', 'agentsaga_operator')
       AND pg_has_role(current_user, r.oid, 'MEMBER');
    IF NOT (is_sidecar OR is_operator)
       OR (is_sidecar AND step IN ('Approved -> Sending', 'Sending -> Sent'))
       OR (is_operator AND step IN ('Proposed -> Approved', 'Proposed -> Dismissed')) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'role % may not move correction %/% from %', current_user, OLD.run_id,
        OLD.step_idx, step
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'the sidecar sends approved corrections; only the operator decides them';
END
$$;
CREATE TRIGGER corrections_allowed_transitions BEFORE UPDATE OF state ON corrections
    FOR EACH ROW EXECUTE FUNCTION agentsaga_correction_transition();
