# syntax=docker/dockerfile:1.7
# The agentsaga sidecar: the gRPC server next to every agent, and the reconcile/unwind Jobs
# the operator starts (same image: `agentsaga reconcile|unwind ...`).
# Build from the repository root:  docker build -f images/sidecar.Dockerfile -t agentsaga-sidecar .
# The build steps live in images/install.sh, which the test suite runs without Docker.

# The base is pinned by digest (a tag can be re-pushed, a digest cannot). To move it:
#   docker buildx imagetools inspect python:3.11.11-slim-bookworm   (the index digest)
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY . .
RUN sh images/install.sh wheel /src /wheels \
    && cp images/install.sh images/requirements.lock /wheels/

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="agentsaga-sidecar" \
      org.opencontainers.image.source="https://github.com/agentsaga/agentsaga" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    sh /wheels/install.sh venv /wheels /opt/venv /wheels/requirements.lock
# distroless-style "nonroot" user; the chart also runs with a read-only root filesystem
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["agentsaga"]
CMD ["sidecar"]
