"""The saga rules (R1-R12), each in one place: the registry, keys, dispatch, reconcile, unwind,
corrections, the pivot, and the states and contracts they share."""
