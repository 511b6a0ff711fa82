"""`agentsaga bench`: dispatch overhead, peers, throughput, memory, start-up, reconcile at scale.

Benchmark-only dependencies (DBOS, Temporal, Restate) are installed by the bench itself into a
separate virtual environment; the product never depends on them.
"""
