"""The command blocks a document tells its reader to type, and a shell that types them.

`blocks(text)` are the fenced ```sh, ```bash and ```console blocks of a Markdown text, in order;
`commands(block)` its command lines (continuations joined). `Shell` is one bash process that is
fed the blocks on its standard input as a user types them into one terminal: `. activate`, `cd`
and the jobs started with `&` carry over from block to block, and `kill %1` means what it says.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

BLOCK = re.compile(r"```(sh|bash|console)\n(.*?)```", re.S)


def blocks(text: str) -> list[tuple[str, str]]:
    """(kind, text) of each fenced sh/bash/console block, in the document's order."""
    return [(kind, body) for kind, body in BLOCK.findall(text)]


def commands(text: str) -> list[str]:
    """The command lines of a block, with backslash continuations joined."""
    joined = text.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip()]


class Shell:
    """`bash -e` reading its script from a pipe: a command that fails ends it (and `run`
    reports the failure with what the shell printed); jobs started with `&` keep running until
    the script stops them or `close` ends the whole process group."""

    def __init__(self, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out: IO[str] = log.open("w")
        self.proc = subprocess.Popen(["bash", "-e"], cwd=cwd, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=self._out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._blocks = 0

    def output(self) -> str:
        return self.log.read_text()

    def run(self, block: str, timeout: float = 120) -> str:
        """Types `block` and waits until the shell has run all of it; what it printed since."""
        self._blocks += 1
        start = len(self.output())
        marker = f"__block_{self._blocks}_done__"
        assert self.proc.stdin is not None
        self.proc.stdin.write(block.rstrip("\n") + f"\necho {marker}\n")
        self.proc.stdin.flush()
        self.wait_for(lambda text: marker in text, f"the end of:\n{block}", timeout)
        return self.output()[start:].replace(marker + "\n", "")

    def wait_for(self, seen: Callable[[str], object], what: str, timeout: float = 120) -> str:
        """Polls what the shell (and its jobs) printed until `seen` holds; fails when the shell
        ended or after `timeout` seconds, showing the output."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.output()
            if seen(text):
                return text
            if self.proc.poll() is not None:
                raise AssertionError(f"the shell exited ({self.proc.returncode}) before "
                                     f"{what}\n--- output:\n{text}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {timeout:g} s\n--- output:\n{text}")
            time.sleep(0.2)

    def close(self, timeout: float = 30) -> int | None:
        """Ends the script; whatever it left running is stopped with its process group."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=timeout)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._out.close()
        return self.proc.returncode
