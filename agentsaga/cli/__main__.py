"""`python -m agentsaga.cli`, as the `agentsaga` command."""

from agentsaga.cli import main

raise SystemExit(main())
