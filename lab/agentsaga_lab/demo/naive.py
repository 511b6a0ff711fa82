"""The naive harness of the essay: the transcript is its log, retries are deduplicated by a hash
of the arguments, a resume replays the transcript, a rollback walks the transcript backwards and
apologises to the customer. It calls the same connectors (with a fresh random key per call, as an
SDK does when none is given); its rollback closes tickets with a fixed transition, as a harness
written against one workflow does."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentsaga.saga.registry import Registry, as_effect
from agentsaga_lab.demo.model import APOLOGY, CHARGE, PLAN, TICKET, Call, retry_of


class WorkerEvicted(Exception):
    """The worker died after the call returned and before its result was written."""


@dataclass
class Entry:
    tool: str
    args: dict[str, Any]
    ok: bool | None = None
    """None: the model decided to call, no result was written."""
    result: Any = None
    error: str = ""
    echo: bool = False


@dataclass
class NaiveHarness:
    registry: Registry
    jira_url: str
    transcript: list[Entry] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)
    die_after: str = ""
    actions: list[str] = field(default_factory=list)

    def _hash(self, call: Call) -> str:
        text = call.tool + json.dumps(call.args, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def call(self, call: Call, entry: Entry | None = None) -> Any:
        entry = entry or Entry(call.tool, dict(call.args))
        if entry not in self.transcript:
            self.transcript.append(entry)
        digest = self._hash(call)
        if digest in self.cache:  # "already done": hand back the cached result
            entry.ok, entry.result, entry.echo = True, self.cache[digest], True
            return entry.result
        spec = self.registry.get(call.tool)
        extra = {} if spec.cls == "pure" else {"idempotency_key": uuid.uuid4().hex}
        try:
            effect = as_effect(spec.fn(**call.args, **extra))
        except Exception as exc:
            entry.ok, entry.error = False, f"{type(exc).__name__}: {exc}"
            raise
        if self.die_after == call.tool:
            self.die_after = ""
            raise WorkerEvicted(call.tool)
        entry.ok, entry.result = True, None if effect is None else effect.result
        self.cache[digest] = entry.result
        return entry.result

    def resume(self) -> None:
        """Feed the transcript back: the model redoes the turn it was in when the pod died."""
        for entry in list(self.transcript):
            if entry.tool == TICKET.tool and entry.ok:
                replay = Entry(entry.tool, dict(entry.args))
                self.call(Call(entry.tool, entry.args), replay)  # caught by the hash cache
            elif entry.ok is None:  # the decision with no result: do it (again)
                self.call(Call(entry.tool, entry.args), entry)

    def rollback(self) -> None:
        """Walk the transcript backwards, undo what it shows, then apologise."""
        for entry in reversed(self.transcript):
            if not entry.ok or entry.tool not in (TICKET.tool, CHARGE.tool):
                continue
            ref = entry.result["id"]
            if entry.tool == TICKET.tool:
                answer = httpx.post(f"{self.jira_url}/rest/api/3/issue/{ref}/transitions",
                                    json={"transition": {"id": "31"}}, timeout=5)
                self.actions.append(f"close {ref} -> HTTP {answer.status_code}")
            else:
                spec = self.registry.get("cancel_or_refund_payment")
                spec.fn(payment=ref, idempotency_key=uuid.uuid4().hex)
                self.actions.append(f"refund {ref}")
        self.call(APOLOGY)
        self.actions.append("apology email sent")


def run(registry: Registry, jira_url: str) -> NaiveHarness:
    """The incident, naively."""
    harness = NaiveHarness(registry, jira_url, die_after=CHARGE.tool)
    for step in PLAN:
        try:
            harness.call(step)
        except WorkerEvicted:
            harness.resume()
        except Exception:
            if step.tool == TICKET.tool:  # the model retries at once, in new words
                harness.call(retry_of(step))
                continue
            harness.rollback()
            break
    return harness
