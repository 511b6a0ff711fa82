-- R10: which approved commit step a row carries out. An approved commit step runs once: a second
-- live row (not FAILED, not NOT_EXECUTED) for the same commit step of a run cannot be inserted.
ALTER TABLE saga_log ADD COLUMN commit_index INT;
CREATE UNIQUE INDEX saga_log_commit_once ON saga_log (run_id, commit_index)
    WHERE commit_index IS NOT NULL AND status NOT IN ('FAILED', 'NOT_EXECUTED');
