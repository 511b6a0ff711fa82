-- Unwind runs only what the tool declares (agentsaga.contracts): the hash of the tool's
-- contract (its compensation, how its arguments derive, its lookup and timing) each intent ran
-- under, and the contract itself, so a later deploy's compatible change can be judged.
ALTER TABLE saga_log ADD COLUMN contract_hash TEXT, ADD COLUMN contract JSONB;
