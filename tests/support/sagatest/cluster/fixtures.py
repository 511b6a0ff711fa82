"""The `control_plane` fixture: one real control plane per test session (per xdist worker),
started on first use. Its start-up (about 4 seconds on 2 cores, once the binary is built) is
paid once; tests isolate themselves by namespace."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sagatest.cluster.control_plane import ControlPlane


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """AGENTSAGA_KEEP_CLUSTER=1 keeps its folder (certificates, kubeconfigs, logs) after the
    session, for a post-mortem; its path is in the fixture's `workdir`."""
    plane = ControlPlane(keep=os.environ.get("AGENTSAGA_KEEP_CLUSTER") == "1")
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
