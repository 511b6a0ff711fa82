"""Embedded Postgres servers started at once: none fails, on a machine that never ran one.

As root, pgserver runs Postgres as a system user it creates on first use; processes starting at
the same moment (test workers, a demo beside the tests) raced on creating it. The product now
creates it once, under a lock (`agentsaga.store.postgres.ensure_system_user`). The first test races
that on a user that does not exist yet (a fresh name each run: the machine's own `pgserver`
user serves the other test workers and is not removed under them); the second starts real
servers at once.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import uuid
from pathlib import Path

STARTERS = 8


def _at_once(code: str, *args: str) -> list[subprocess.CompletedProcess[str]]:
    """Run `code` in STARTERS processes released together (each waits for a file to appear)."""
    go = Path(f"/tmp/agentsaga-go-{uuid.uuid4().hex}")
    waiting = ("import os, sys, time\n"
               f"while not os.path.exists({str(go)!r}): time.sleep(0.001)\n")
    started = [subprocess.Popen([sys.executable, "-P", "-c", waiting + code, *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(STARTERS)]
    go.touch()
    try:
        return [subprocess.CompletedProcess(p.args, p.wait(timeout=180), *p.communicate())
                for p in started]
    finally:
        go.unlink()


def test_many_processes_create_the_system_user_once() -> None:
    name = f"sagarace{uuid.uuid4().hex[:8]}"
    try:
        done = _at_once("from agentsaga.store.postgres import ensure_system_user\n"
                        "ensure_system_user(sys.argv[1])\n", name)
        assert [d.returncode for d in done] == [0] * STARTERS, [d.stderr for d in done]
        if os.geteuid() == 0:
            entries = [line for line in Path("/etc/passwd").read_text().splitlines()
                       if line.split(":")[0] == name]
            assert len(entries) == 1, entries
        else:  # pgserver runs as the calling user: no user is made
            assert name not in {entry.pw_name for entry in pwd.getpwall()}
    finally:
        if os.geteuid() == 0:
            subprocess.run(["userdel", name], check=False, capture_output=True)


def test_embedded_servers_started_at_once_all_answer(tmp_path: Path) -> None:
    done = _at_once("import psycopg\n"
                    "from pathlib import Path\n"
                    "from agentsaga.store.postgres import embedded_dsn\n"
                    "dsn = embedded_dsn(Path(sys.argv[1]) / str(os.getpid()))\n"
                    "with psycopg.connect(dsn) as c:\n"
                    "    print(dsn, c.execute('select 41 + 1').fetchone()[0])\n",
                    str(tmp_path))
    assert [d.returncode for d in done] == [0] * STARTERS, [d.stderr for d in done]
    answers = [d.stdout.split() for d in done]
    assert [answer for _, answer in answers] == ["42"] * STARTERS
    assert len({dsn for dsn, _ in answers}) == STARTERS  # a server each
