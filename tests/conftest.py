"""Shared fixtures: each family lives in its own module of `sagatest` (tests/support), named for
what it yields."""

from __future__ import annotations

import collections
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from agentsaga import grpc_tuning

# this process's clients and in-process sidecars run gRPC as the processes `agentsaga` starts
# do: set before the fixture modules below import grpc (its core reads it then, once)
grpc_tuning.apply()

SUPPORT = Path(__file__).resolve().parent / "support"
TALLY = "tally: "
"""A `record_property` name starting so is summed over the session and printed at its end."""

NODE_FIXTURES = {("node_cluster", "sagatest.cluster.fixtures"),
                 ("cluster", "sagatest.operator_fixtures"),
                 ("namespaced_cluster", "sagatest.operator_fixtures")}
"""The fixtures that start a real node (`sagatest.cluster.node`): a test taking one runs in
the `real-node` group. A test that starts a node otherwise carries the mark `real_node`."""
REAL_NODE = "real-node"
GROUPS_FILE = "AGENTSAGA_TEST_GROUPS"
"""The environment variable naming the file of the test groups (`pytest_xdist_make_scheduler`)."""
CONTROL_PLANES = {"control_plane", "kube", "kube_with_crds"}
"""The fixtures that start a control plane (without a node)."""

pytest_plugins = ["sagatest.pg_fixtures", "sagatest.sidecar_fixtures", "sagatest.world_fixtures",
                  "sagatest.operator_fixtures", "sagatest.operator_log",
                  "sagatest.ledger_fixtures",
                  "sagatest.otlp_collector", "sagatest.mcp_fixtures",
                  "sagatest.prometheus_fixtures", "sagatest.log_checks",
                  "sagatest.outcome_modes", "sagatest.traced",
                  "sagatest.cluster.fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    """The processes the tests start (sidecars, Jobs, the operator) import the helpers the way
    this one does: from tests/support, and never from their working directory (PYTHONSAFEPATH
    keeps `python -m` from putting the repository root first on sys.path)."""
    paths = [str(SUPPORT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ["PYTHONSAFEPATH"] = "1"
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") == "loadgroup":
        # where the workers hand the controller the groups they collected
        folder = Path(tempfile.mkdtemp(prefix="agentsaga-test-groups-"))
        os.environ[GROUPS_FILE] = str(folder / "groups.json")
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    config.addinivalue_line(
        "markers", "real_node: starts a real node (one runs on a machine at a time): with "
        "`--dist loadgroup`, in the one worker that runs them all")
    config.addinivalue_line(
        "markers", "one_cluster_per_module: the module's tests share one operator cluster "
        "(sagatest.operator_fixtures `cluster`): none changes anything outside `default`, and "
        "what they make there is deleted after each")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The groups `make test` distributes (`--dist loadgroup`, each group whole in one worker
    process; `GroupScheduling`): a test file (its module fixtures set up once), except the
    tests that start a real node, which are one group together. One node runs on a machine at
    a time (a machine-wide lock), so they run one after the other in one worker, while the
    others run the rest of the suite instead of waiting for the lock.

    The order the groups are handed out in (`--no-loadscope-reorder` keeps it; within a group,
    pytest-randomly's): the node's group first, the longest; then the files that start control
    planes or campaigns (tests/e2e, tests/chaos, a control plane's fixture), minutes each, so
    that none of them starts last; then the others, largest first."""
    groups = {item: REAL_NODE if _starts_a_node(item) else item.nodeid.split("::", 1)[0]
              for item in items}
    sizes = collections.Counter(groups.values())
    slow = {group for item, group in groups.items() if _slow(item)}
    items.sort(key=lambda item: (groups[item] != REAL_NODE, groups[item] not in slow,
                                 -sizes[groups[item]]))
    handed = os.environ.get(GROUPS_FILE)
    if handed and hasattr(config, "workerinput"):  # a worker: the controller schedules
        partial = Path(f"{handed}.{os.getpid()}")
        partial.write_text(json.dumps({item.nodeid: group for item, group in groups.items()}))
        partial.replace(handed)  # every worker collects the same, so any one's will do


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` with the groups above (xdist's own reads `xdist_group` marks from
    node ids, which pytest 9 no longer lets it rewrite)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # scheduled once every worker has collected
                self.groups = json.loads(Path(os.environ[GROUPS_FILE]).read_text())
            return self.groups.get(nodeid, nodeid.split("::", 1)[0])

    return GroupScheduling(config, log)


def _slow(item: pytest.Item) -> bool:
    path = item.nodeid.split("::", 1)[0]
    return (path.startswith(("tests/e2e/", "tests/chaos/"))
            or bool(CONTROL_PLANES.intersection(getattr(item, "fixturenames", ()))))


def _starts_a_node(item: pytest.Item) -> bool:
    if item.get_closest_marker("real_node") is not None:
        return True
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for name in getattr(item, "fixturenames", ()):
        definitions = info.name2fixturedefs.get(name) or ()
        # the definition the test gets (a module's own `cluster` overrides the shared one)
        if definitions and (name, definitions[-1].func.__module__) in NODE_FIXTURES:
            return True
    return False


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    """The order is random (pytest-randomly): say how to replay it, even under -q."""
    tallies: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":  # the teardown's repeats them
                continue
            for name, value in getattr(report, "user_properties", ()):
                if isinstance(name, str) and name.startswith(TALLY):
                    tallies[name[len(TALLY):]] = tallies.get(name[len(TALLY):], 0) + int(value)
    for name, total in sorted(tallies.items()):  # counts the tests record (record_property)
        terminalreporter.write_line(f"{name}: {total}")
    seed = getattr(config.option, "randomly_seed", None)
    if config.pluginmanager.hasplugin("randomly") and isinstance(seed, int):
        terminalreporter.write_line(f"random test order: replay it with "
                                    f"--randomly-seed={seed}")
