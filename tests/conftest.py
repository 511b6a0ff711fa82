"""Shared fixtures: each family lives in its own module, named for what it yields."""

pytest_plugins = ["tests.pg_fixtures", "tests.sidecar_fixtures", "tests.world_fixtures",
                  "tests.operator_fixtures", "tests.ledger_fixtures",
                  "tests.prometheus_fixtures"]
