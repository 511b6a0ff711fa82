"""`agentsaga demo`: the refund-and-reship incident of the essay, run twice against the same
local world with the same faults: once by a naive harness (transcript replay, argument-hash
dedup), once through the real sidecar. `incident` runs it, `naive` is the naive harness, `model`
the deterministic scripted model, `report` the table and JSON, `world` the world's setup."""
