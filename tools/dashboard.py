"""Write the chart's Grafana dashboard (charts/agentsaga/dashboards/agentsaga.json) from its
panels, declared with what the reference session must show in each in `sagatest.dashboard`
(tests/support: the end-to-end test evaluates every panel's query against a real Prometheus).

    python -P tools/dashboard.py           write the JSON
    python -P tools/dashboard.py --check   fail when the JSON differs from the panels
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT / "tests" / "support"))  # the test helpers' package, only
    from sagatest.dashboard import DASHBOARD, PANELS, render

    text = render()
    if "--check" in argv:
        if DASHBOARD.read_text() != text:
            print(f"{DASHBOARD} differs from its panels (tests/support/sagatest/dashboard.py): "
                  "run `python -P tools/dashboard.py`", file=sys.stderr)
            return 1
        return 0
    DASHBOARD.write_text(text)
    print(f"wrote {DASHBOARD} ({len(PANELS)} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
