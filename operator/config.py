"""The operator's fixed names: the AgentRun resource, its labels, annotations and finalizer.
What is configured is `agentsaga.settings.OperatorSettings`, read once by `agentsaga operator`
and handed to every handler through kopf's `memo` (`context.Context.config`)."""

from __future__ import annotations

GROUP = "agentsaga.io"
VERSION = "v1alpha1"
PLURAL = "agentruns"
AGENTRUNS = (GROUP, VERSION, PLURAL)

RUN_LABEL = "agentsaga.io/run"
"""On agent pods (value: the AgentRun's name) and on the operator's Jobs."""
JOB_KIND_LABEL = "agentsaga.io/job-kind"
JOB_POD_LABEL = "agentsaga.io/job"
"""On the pods of a reconcile/unwind Job (never `agentsaga.io/run`: they are not agent pods)."""
FINALIZER = "agentsaga.io/finalizer"
FORCE_DELETE = "agentsaga.io/force-delete"
PREFIX = "agentsaga.io"
DEFAULT_ORPHAN_GRACE_SECONDS = 60
"""spec.orphanGracePeriodSeconds when the AgentRun does not set it."""
