"""A Kubernetes API stand-in for tests: real kubectl, kopf and the `kubernetes` client talk to it.

Test infrastructure, not product code. See `KubeStandIn` for the Python API and
/work/shared/reference/kubernetes.md for the behaviour it reproduces.
"""

from .errors import ApiError
from .resources import PrinterColumn, Registry, ResourceType
from .server import RequestRecord
from .standin import KubeStandIn

__all__ = ["ApiError", "KubeStandIn", "PrinterColumn", "Registry", "RequestRecord",
           "ResourceType"]
