"""Tally of the fuzz runs: requests tried, server errors, crashes (printed and written to out/fuzz/).

Each fuzz test records into :data:`FIGURES`; the summary is printed at the end of
each test module (``pytest -s`` shows it) and appended to ``out/fuzz/figures.jsonl``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

FIGURES: dict[str, Counter[str]] = {}


def record(run: str, outcome: str) -> None:
    """Count one request of ``run`` with ``outcome`` (a status code name / HTTP status)."""
    FIGURES.setdefault(run, Counter())[outcome] += 1


def write_summary(run: str, *, server_errors: int, crashes: int) -> dict[str, object]:
    counts = FIGURES.get(run, Counter())
    summary: dict[str, object] = {
        "run": run,
        "requests": sum(counts.values()),
        "server_errors": server_errors,
        "crashes": crashes,
        "by_status": dict(sorted(counts.items())),
        "at_unix_s": int(time.time()),
    }
    out = Path(__file__).resolve().parents[2] / "out" / "fuzz"
    out.mkdir(parents=True, exist_ok=True)
    with (out / "figures.jsonl").open("a") as f:
        f.write(json.dumps(summary) + "\n")
    print(f"\nFUZZ {json.dumps(summary)}")
    return summary
