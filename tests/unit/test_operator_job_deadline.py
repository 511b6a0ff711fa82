"""The reconcile/unwind Jobs' deadline (AGENTSAGA_JOB_DEADLINE_SECONDS): on the Job when set,
refused with a message naming the variable when it is not a positive number."""

from __future__ import annotations

import pytest

from agentsaga.errors import ConfigurationError
from agentsaga.operator.job_manifests import build_job
from agentsaga.settings import Settings

RUN = {"metadata": {"name": "refund-1182", "namespace": "agents", "uid": "u-1"}}


def job_spec(env: dict[str, str]) -> dict[str, object]:
    config = Settings.from_env({"AGENTSAGA_SIDECAR_IMAGE": "sidecar:1", **env}).operator
    job = build_job(RUN, "unwind", "agentsaga-refund-1182-unwind-e2", "refund-1182", config, None)
    spec: dict[str, object] = job["spec"]
    return spec


def test_jobs_carry_the_configured_deadline_and_none_without_it() -> None:
    assert job_spec({"AGENTSAGA_JOB_DEADLINE_SECONDS": "1800"})["activeDeadlineSeconds"] == 1800
    assert "activeDeadlineSeconds" not in job_spec({})


@pytest.mark.parametrize("raw", ["soon", "0", "-5"])
def test_a_deadline_that_is_not_a_positive_number_is_refused(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="AGENTSAGA_JOB_DEADLINE_SECONDS"):
        Settings.from_env({"AGENTSAGA_JOB_DEADLINE_SECONDS": raw})


def test_jobs_mount_no_token_and_are_removed_after_the_configured_ttl() -> None:
    spec = job_spec({"AGENTSAGA_JOB_TTL_SECONDS": "3600"})
    assert spec["ttlSecondsAfterFinished"] == 3600
    template = spec["template"]
    assert isinstance(template, dict)
    assert template["spec"]["automountServiceAccountToken"] is False
    assert "ttlSecondsAfterFinished" not in job_spec({})
    with pytest.raises(ConfigurationError, match="AGENTSAGA_JOB_TTL_SECONDS"):
        Settings.from_env({"AGENTSAGA_JOB_TTL_SECONDS": "0"})
