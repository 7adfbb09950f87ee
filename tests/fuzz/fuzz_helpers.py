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
