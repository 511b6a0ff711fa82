# The sidecar image with your own tools in it: the same image runs next to every agent and in
# the reconcile, unwind and corrections Jobs the operator starts, so the tools must be inside.
# Build it from this folder (see docs/deploy.md):
#   docker build -f sidecar.Dockerfile --build-arg BASE=registry.example.com/agentsaga/sidecar:0.1.0 \
#     -t registry.example.com/agentsaga/sidecar-refunds:0.1.0 .
# and install the chart with --set sidecar.image.repository=... --set 'sidecar.tools={refund_tools}'.
ARG BASE=registry.example.com/agentsaga/sidecar:0.1.0
FROM ${BASE}
# Your tools' own dependencies, if any, go into the image's environment (/opt/venv), which holds
# no installer: a throwaway one installs into it, as root, the container then runs as before:
#   USER root
#   COPY requirements.txt /tmp/
#   RUN python3 -m venv /tmp/installer && /tmp/installer/bin/pip --python /opt/venv/bin/python \
#         install --no-cache-dir -r /tmp/requirements.txt && rm -rf /tmp/installer
#   USER 65532:65532
COPY refund_tools.py /opt/agentsaga-tools/refund_tools.py
# AGENTSAGA_TOOLS=refund_tools (the chart's sidecar.tools) is found here
ENV PYTHONPATH=/opt/agentsaga-tools
