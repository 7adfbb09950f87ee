"""Helpers of the agent tests: the hand-written tool-output fixtures (see fixtures/README.md) and a scripted clock."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    """Fixture text without its provenance header (everything up to the ``---`` line)."""
    text = (FIXTURES / name).read_text()
    head, sep, body = text.partition("\n---\n")
    assert sep, f"{name} lacks its provenance header"
    assert "not captured" in head
    return body


class Clock:
    """``daemon.time`` stand-in: ``monotonic()`` and ``time()`` return what the test set."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now
