"""Helpers for the hand-written tool-output fixtures (see fixtures/README.md)."""

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
