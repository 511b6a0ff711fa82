"""The saga log's schema as numbered SQL files (`NNN_name.sql`); `agentsaga.store.schema` applies
them in order."""
