-- A run's state is one of agentsaga.states.RunState (tested against the enum).
ALTER TABLE saga_runs ADD CONSTRAINT saga_runs_state_check
    CHECK (state IN ('running', 'awaiting_approval', 'committing', 'succeeded', 'failed',
                     'unwinding', 'unwound'));
