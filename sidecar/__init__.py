"""The gRPC sidecar: serves `agentsaga.v1.Sidecar` for the agent in its pod."""
