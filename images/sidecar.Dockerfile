# syntax=docker/dockerfile:1.7
# The agentsaga sidecar: the gRPC server next to every agent, the chart's migration Job and the
# reconcile/unwind Jobs the operator starts (same image: `agentsaga migrate|reconcile|unwind`).
# It installs agentsaga[stripe] and never the Kubernetes client or kopf.
#
# The build context is not the repository but a wheelhouse made on the host from uv.lock's hashes
# (images/sidecar.requirements.lock) and the product's wheel built from the current source, so
# that no build step reaches the network:
#   .venv/bin/python -P tools/images.py context sidecar build/sidecar
#   docker build --network none -f images/sidecar.Dockerfile -t agentsaga-sidecar build/sidecar
# `python -P tools/images.py build` builds every image this way with buildah (as the tests do),
# on a Debian-packaged Python base given as PYTHON_IMAGE.

# The base is pinned by digest (a tag can be re-pushed, a digest cannot). To move it:
#   docker buildx imagetools inspect python:3.11.11-slim-bookworm   (the index digest)
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="agentsaga-sidecar" \
      org.opencontainers.image.source="https://github.com/agentsaga/agentsaga" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
# The locked dependencies: a layer that changes only with the lock, install.sh or the base
COPY install.sh requirements.lock /opt/agentsaga/
RUN --mount=type=bind,source=wheels,target=/wheels \
    sh /opt/agentsaga/install.sh deps /wheels /opt/venv /opt/agentsaga/requirements.lock
# The product: a thin layer of its own, the only one a change of the source rebuilds
COPY product/ /opt/agentsaga/product/
RUN sh /opt/agentsaga/install.sh product /opt/agentsaga/product /opt/venv
# distroless-style "nonroot" user; the chart also runs with a read-only root filesystem
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["agentsaga"]
CMD ["sidecar"]
