"""`agentsaga bench --from-json FILE --write-docs PAGE` writes the documentation's figures page
from a saved run, measuring nothing: every figure on it is the run's, and the results are kept
beside it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentsaga_lab.bench.cli import render


class Recording(dict[str, Any]):
    """A result in which every key the report reads is there: a figure of 1.5 each."""

    def __missing__(self, key: str) -> Any:
        self[key] = 1.5
        return 1.5


def synthetic() -> dict[str, Any]:
    """Every key `agentsaga bench`'s report reads, as a plain result a run could have saved."""
    seen = Recording(reconcile_rows=1000, reconcile_found=980, reconcile_not_executed=20,
                     reconcile_batched_requests=104, reconcile_unbatched_requests=1050,
                     reconcile_unbatched_sample_rows=100, reconcile_unbatched_extrapolated=True,
                     sidecar_dispatch_p50_ms=2.25, sidecar_dispatch_p99_ms=4.75,
                     run={"command": "agentsaga bench --quick", "date": "2026-12-06 20:40 UTC",
                          "cpus": 2, "load_average": 0.5, "python": "3.11.7",
                          "platform": "Linux x86_64"})
    render(seen)
    return dict(seen)


def test_the_page_is_written_from_a_saved_run(tmp_path: Path) -> None:
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(synthetic()))
    page = tmp_path / "site" / "figures.md"
    done = subprocess.run([sys.executable, "-m", "agentsaga.cli", "bench", "--from-json",
                           str(saved), "--write-docs", str(page)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert text.startswith("# Benchmark figures\n")
    assert "| sidecar dispatch (gRPC) | 2.250 | 4.750 |" in text
    assert "| peer: dbos_step | not measured | not measured |" in text
    assert "| command | agentsaga bench --quick |" in text
    assert "| load average at the start | 0.5 |" in text
    assert ("- reconcile 1000 UNKNOWN Stripe rows at 20 searches/s (980 found, 20 never "
            "happened)") in text
    assert json.loads(page.with_suffix(".json").read_text()) == json.loads(saved.read_text())
    assert "sidecar dispatch (gRPC)" in done.stdout  # the table is printed as always


def test_a_run_without_its_facts_says_so(tmp_path: Path) -> None:
    results = synthetic()
    del results["run"]
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(results))
    page = tmp_path / "figures.md"
    subprocess.run([sys.executable, "-m", "agentsaga.cli", "bench", "--from-json", str(saved),
                    "--write-docs", str(page)], check=True, capture_output=True, timeout=60,
                   cwd=tmp_path)
    assert "| command | not recorded |" in page.read_text()


def test_a_run_under_load_is_marked_on_its_page_and_a_quiet_one_is_not(tmp_path: Path) -> None:
    results = synthetic()
    results.update(floor_commit_p50_ms=0.5, floor_grpc_p50_ms=0.25)
    for facts, marked in (({"load_average": 0.3, "cpus": 2, "representative": True}, False),
                          ({"load_average": 0.3, "cpus": 2, "others_load_most": 5.1,
                            "representative": False}, True),
                          ({"load_average": 9.5, "cpus": 2}, True),  # saved before the watch
                          ({"load_average": 1.5, "cpus": 2}, False)):
        results["run"] = {"command": "agentsaga bench --quick", **facts}
        saved = tmp_path / "run.json"
        saved.write_text(json.dumps(results))
        page = tmp_path / "figures.md"
        subprocess.run([sys.executable, "-m", "agentsaga.cli", "bench", "--from-json",
                        str(saved), "--write-docs", str(page)], check=True,
                       capture_output=True, timeout=60, cwd=tmp_path)
        text = page.read_text()
        assert ('!!! warning "Not representative"' in text) is marked, facts
        assert f"| representative | {'no' if marked else 'yes'} |" in text
        # the ratios come before any absolute figure
        assert text.index("## Ratios") < text.index("## Latency")
        assert ("| sidecar dispatch p50 | 3.00x | the commit floor + the gRPC round-trip "
                "floor |") in text  # 2.25 ms over 0.5 + 0.25 ms


def test_the_load_that_counts_is_above_the_core_count() -> None:
    from agentsaga_lab.bench.machine_load import Reading, loaded

    assert not loaded(2.0, 2) and loaded(2.1, 2)
    assert Reading(start=0.5, most=3.5, others_most=1.2, cpus=2).representative
    assert not Reading(start=0.5, most=6.0, others_most=4.0, cpus=2).representative
    assert not Reading(start=3.0, most=3.0, others_most=0.0, cpus=2).representative
