"""Where the compiled twins' test modules run (service/native, the ``edgepath_native`` package; issue 16).

A module of this name, not a ``conftest.py`` helper: several directories have a ``conftest.py`` (see
``service_harness``).
"""

from __future__ import annotations

import shutil

import pytest


def require_compiled(installed: bool, what: str) -> None:
    """Call at a test module's top: nothing where ``installed``; else the module fails where cargo is on this
    machine (``make setup`` builds the package, so its absence is a broken setup) and is skipped, saying why,
    where there is no Rust toolchain to build it. ``what``: the compiled part, for the message."""
    if installed:
        return
    if shutil.which("cargo") is not None:
        pytest.fail(
            f"{what} is not installed (or does not match this checkout) though cargo is: `make setup` builds it "
            "from service/native",
            pytrace=False,
        )
    pytest.skip("edgepath_native is not built: no Rust toolchain (cargo) on this machine", allow_module_level=True)
