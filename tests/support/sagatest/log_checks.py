"""A passing test leaves no warning of a failed effect: a record at WARNING or above from an
`agentsaga` logger in the test's own process (a compensation that failed, a tool that raised)
fails the test, unless it says it expects one:

    @pytest.mark.allow_effect_warnings("why the warning belongs to this test")

Processes the tests start (sidecars, Jobs, the operator) are judged by what they left in the
world and the log, which the tests assert."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

MARKER = "allow_effect_warnings"


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(reason): the test expects agentsaga to log a warning "
        "(a failed effect it provokes); without it such a warning fails the test")


@pytest.fixture(autouse=True)
def no_effect_warnings(request: pytest.FixtureRequest) -> Iterator[None]:
    handler = _Collect()
    logger = logging.getLogger("agentsaga")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    if handler.records and request.node.get_closest_marker(MARKER) is None:
        lines = "\n".join(f"  {r.name} {r.levelname}: {r.getMessage()}" for r in handler.records)
        pytest.fail(f"agentsaga logged {len(handler.records)} warning(s) in a test that does not "
                    f"expect them (mark it `{MARKER}(reason)` if it provokes them):\n{lines}",
                    pytrace=False)
