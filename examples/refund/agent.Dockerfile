# syntax=docker/dockerfile:1.7
# The example's agent (agent.py) as a container: the agent container of a pod whose sidecar the
# operator's webhook injects; it talks to that sidecar on localhost (AGENTSAGA_ADDRESS) and to
# nothing else. The run id comes from EXAMPLE_RUN_ID (or the first argument); EXAMPLE_STAY=1 keeps
# the container running after the run ends, until it is stopped.
#
# Built like the product's images, from a wheelhouse made on the host, with no network in the
# build; it installs the agent side alone (client/: `agentsaga-client`, the client and the
# adapters, with grpcio, protobuf, pydantic and the OpenTelemetry API; images/agent.requirements.lock),
# not the product (no database driver, no MCP server, no Kubernetes client):
#   .venv/bin/python -P tools/images.py context agent build/agent
#   docker build --network none -f examples/refund/agent.Dockerfile -t refund-agent build/agent
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="agentsaga-refund-agent" \
      org.opencontainers.image.source="https://github.com/agentsaga/agentsaga" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
COPY install.sh requirements.lock /opt/agentsaga/
RUN --mount=type=bind,source=wheels,target=/wheels \
    sh /opt/agentsaga/install.sh deps /wheels /opt/venv /opt/agentsaga/requirements.lock
COPY product/ /opt/agentsaga/product/
RUN sh /opt/agentsaga/install.sh product /opt/agentsaga/product /opt/venv
COPY app/agent.py /opt/agent/agent.py
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["python", "-P", "/opt/agent/agent.py"]
