"""The demo's account of each run in words a reader follows: what happened step by step, why
the naive outcome hurts a customer, what the audiences and correction states mean, what to try
next. Every count in it comes from the world's ground truth (`report.outcome`)."""

from __future__ import annotations

import textwrap

SETUP = """\
The run: a support agent handles a refund for order 1182. It opens a Jira ticket, charges a
re-shipping fee through Stripe, then asks the warehouse to reship. Three things go wrong, the
same for both harnesses: Jira answers 504 after creating the ticket; the worker is evicted right
after Stripe authorises the fee; the warehouse rejects the reship. Stripe receipts are off."""

LEGEND = """\
Audiences (who could have seen a step): agent = only the agent; support_team = the support
queue; finance = statements and ledgers (no receipt was sent); customer = the customer reads it.
Correction states: Silent = undone, and nobody outside saw it, so there is nothing to say;
Proposed = the customer saw it: a human must approve a letter before it goes; Approved,
Rejected, Sent = what the human decided and what went out."""

NEXT = """\
Try next:
  agentsaga demo --json          the same run as JSON (ground truth, saga log, unwind report)
  examples/refund/README.md      a runnable agent with your own tools, a pivot and an approval
                                 in five commands; `agentsaga log --run refund-1` shows its log
  agentsaga world                the stand-ins, with fault injection, for your own agent"""


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def naive_story(outcome: dict[str, int], actions: list[str]) -> str:
    """What the transcript-driven harness did, and what the customer is left with."""
    steps = [
        "Jira's 504 reached the model as an error; it retried at once in new words ('Order "
        "#1182 refund'), and a harness that deduplicates by hashing the arguments let it "
        f"through: {_plural(outcome['tickets_created'], 'ticket')} for one refund.",
        "After the eviction the transcript ended with the decision to charge the card, so the "
        f"resumed model charged it again: {_plural(outcome['charges'], 'charge')}.",
        "The warehouse said no, and the rollback walked the transcript: "
        + ("; ".join(actions) or "nothing") + ".",
    ]
    hurt = (f"Why it hurts: {_plural(outcome['charges_unrefunded'], 'charge')} still on the "
            "customer's statement, "
            f"{_plural(outcome['customer_emails'], 'apology email')} about a charge they never "
            f"saw (receipts were off), {_plural(outcome['ghost_closes'], 'second close')} of a "
            f"ticket already closed (the other ticket was never closed) and "
            f"{_plural(outcome['tickets_open'], 'ticket')} left open in the support queue.")
    return _numbered("Naive harness (transcript replay, argument-hash dedup):", steps, hurt)


def agentsaga_story(outcome: dict[str, int], notes: list[str],
                    corrections: list[dict[str, object]]) -> str:
    """What the harness with the saga log did, from its own notes and the unwind report."""
    silent = [c for c in corrections if c.get("state") == "Silent"]
    steps = [note + "." for note in notes]
    steps.append(
        "The unwind read the saga log backwards, asked each system by key first, and undid "
        f"each effect once: {_plural(outcome['refunds'], 'refund or released hold')}, "
        f"{_plural(outcome['tickets_created'] - outcome['tickets_open'], 'ticket')} closed.")
    said = (f"{_plural(len(silent), 'correction')} Silent: nobody outside saw those effects, so "
            "no letter went out" if silent else "no correction was needed")
    result = (f"Result: {_plural(outcome['charges'], 'charge')} (released), "
              f"{_plural(outcome['tickets_created'], 'ticket')} (closed), {said}; "
              f"{_plural(outcome['customer_emails'], 'email')} to the customer.")
    return _numbered("agentsaga (intent log, keys from run and step, reconcile first):", steps,
                     result)


def _numbered(title: str, steps: list[str], last: str) -> str:
    lines = [title]
    for number, step in enumerate(steps, 1):
        lines += textwrap.wrap(step, 96, initial_indent=f"  {number}. ",
                               subsequent_indent="     ")
    lines += textwrap.wrap(last, 96, initial_indent="  ", subsequent_indent="  ")
    return "\n".join(lines)
