-- A correction being sent is recorded before the call (R2 for corrections): Approved -> Sending
-- -> Sent. A Sending correction found after a crash is looked up by its key before any resend.
ALTER TABLE corrections DROP CONSTRAINT corrections_state_check;
ALTER TABLE corrections ADD CONSTRAINT corrections_state_check
    CHECK (state IN ('Proposed', 'Approved', 'Sending', 'Sent', 'Dismissed', 'Silent'));
