"""The saga service: what every front end (the sidecar's gRPC and MCP endpoints) asks for, over
typed inputs and outputs, with the checks a request passes before anything is written."""
