"""The test suite's helpers and fixtures, a package of their own: importable from
`tests/support` (pytest's `pythonpath`, and `PYTHONPATH` for the processes the tests start),
never from the repository root, whose `operator/` folder would shadow the standard library's.

`cluster` is the real Kubernetes control plane of the end-to-end tests (with the chart
installed by helm and the node that runs pods); `*_fixtures` are the pytest plugins that
`tests/conftest.py` loads; `ledger_tools` and the others are plain helpers.
"""
