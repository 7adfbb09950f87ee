"""The security tests' helpers (real servers, raw gRPC calls), loaded by path from tests/security/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any


def _load() -> Any:
    name = "edge_security_helpers"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "security" / "edge_security_helpers.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_h = _load()
running_service = _h.running_service
grpc_unary = _h.grpc_unary
context_body = _h.context_body
RECOMMEND = _h.RECOMMEND
REPORT_OUTCOME = _h.REPORT_OUTCOME


def fuzz_settings(max_examples: int) -> Any:
    """Hypothesis settings of a fuzz run: ``max_examples`` per operation, no deadline, no example database.

    Nightly-sized runs (issue 17): ``EDGEPATH_FUZZ_EXAMPLES=1000`` sets the examples per operation (and per
    stateful run); ``EDGEPATH_FUZZ_SEED`` set switches the fixed derandomized draw off, so the run draws from
    Hypothesis's ``--hypothesis-seed``::

        for seed in 1 2 3; do EDGEPATH_FUZZ_EXAMPLES=1000 EDGEPATH_FUZZ_SEED=$seed \\
            .venv/bin/python -m pytest tests/fuzz -q -p no:randomly --timeout=0 --hypothesis-seed=$seed; done
    """
    import os

    from hypothesis import HealthCheck, settings

    examples = int(os.environ.get("EDGEPATH_FUZZ_EXAMPLES") or max_examples)
    seeded = bool(os.environ.get("EDGEPATH_FUZZ_SEED"))
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=not seeded,
        database=None,
    )
