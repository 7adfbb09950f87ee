"""Dispatch of the issue-20 scenarios ``mlpm`` and ``cc`` (kept apart from cli.py to keep that file small)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def run_extra(scenario: str, report: Path, plot: Path | None, steps: int | None, seed: int, command: list[str]) -> str:
    """Run scenario ``mlpm`` or ``cc`` end to end; returns a one-line summary.

    Raises
    ------
    ValueError
        For another scenario name or a missing default trace.
    RuntimeError
        When the scenario fails.
    """
    if scenario == "mlpm":
        from edgepath_agent.testbed import mlpm

        trace = mlpm.default_trace()
        if trace is None:
            raise ValueError("the mlpm scenario needs ../shared/data/5gophers/driving-trace-2.csv")
        p = mlpm.MlpmParams(trace=str(trace), seed=seed, command=command)
        if steps is not None:
            p.steps = steps
        out = mlpm.run(p, report, plot)
        summary = {s: {k: v[k]["mean"] for k in ("rtt_ms", "throughput_mbps")} for s, v in out["steerings"].items()}
        return f"mean per steering: {json.dumps(summary)}"
    if scenario == "cc":
        from edgepath_agent.testbed import cc

        q = cc.CcParams(seed=seed, command=command)
        if steps is not None:
            q.repetitions = steps
        out = cc.run(q, report, plot)
        return "advised within CI of best: " + json.dumps(
            {prof: v["advised_within_ci_of_best"] for prof, v in out["profiles"].items()}
        )
    raise ValueError(f"unknown scenario {scenario!r}")


def run_extra_inside(scenario: str, params: dict[str, Any], report: Path, plot: Path | None) -> None:
    """The scenario part that runs inside the device namespace."""
    if scenario == "mlpm":
        from edgepath_agent.testbed import mlpm

        mlpm.run_inside(mlpm.MlpmParams(**params), report, plot)
    elif scenario == "cc":
        from edgepath_agent.testbed import cc

        cc.run_inside(cc.CcParams(**params), report, plot)
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
