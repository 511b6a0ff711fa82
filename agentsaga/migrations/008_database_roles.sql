-- Decisions are written by the operator's database role only (the grants are in
-- agentsaga/store/roles.py, applied at the end of every migrate).
-- The pivot decision lives in a column of its own, which the sidecar's role may read but not
-- write; the staged plan (`pivot`) stays the sidecar's. The store believes a decision only
-- from this column.
ALTER TABLE saga_runs ADD COLUMN pivot_decision JSONB;
-- A correction approved, being sent, sent or dismissed names who decided it: the sidecar's role
-- may move an approved correction on (Sending, Sent) but never writes `approver`, so it cannot
-- approve one itself.
ALTER TABLE corrections ADD CONSTRAINT corrections_decided_by_someone
    CHECK (state NOT IN ('Approved', 'Sending', 'Sent', 'Dismissed') OR approver IS NOT NULL)
    NOT VALID;
