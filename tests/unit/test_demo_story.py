"""The demo's story: every count comes from the outcome it is given, the legend explains the
audiences and correction states the demo prints, and it says what to try next."""

from __future__ import annotations

from agentsaga_lab.demo import story
from agentsaga_lab.demo.report import EXPECTED_AGENTSAGA, EXPECTED_NAIVE


def test_naive_story_says_why_the_outcome_hurts_the_customer() -> None:
    text = " ".join(story.naive_story(EXPECTED_NAIVE, ["close SUP-1 -> HTTP 204",
                                                       "apology email sent"]).split())
    assert "2 tickets for one refund" in text and "charged it again: 2 charges" in text
    assert "1 charge still on the customer's statement" in text
    assert "1 apology email about a charge they never saw" in text
    assert "close SUP-1 -> HTTP 204; apology email sent." in text
    worse = " ".join(story.naive_story({**EXPECTED_NAIVE, "charges": 3}, []).split())
    assert "charged it again: 3 charges" in worse  # counted, not written in


def test_agentsaga_story_numbers_each_step_and_the_result() -> None:
    text = story.agentsaga_story(EXPECTED_AGENTSAGA, ["create_ticket: outcome unknown"],
                                 [{"state": "Silent"}, {"state": "Silent"}])
    assert "  1. create_ticket: outcome unknown." in text
    assert "  2. The unwind read the saga log backwards" in text
    assert "2 corrections Silent" in " ".join(text.split())
    assert "0 emails to the customer" in " ".join(text.split())


def test_legend_and_next_steps() -> None:
    for word in ("support_team", "finance", "customer", "Silent", "Proposed"):
        assert word in story.LEGEND
    assert "agentsaga demo --json" in story.NEXT and "examples/refund" in story.NEXT
