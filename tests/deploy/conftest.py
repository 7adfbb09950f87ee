"""Fixtures of the deployment tests: the pinned helm CLI and rendered chart manifests.

``helm_bin`` builds helm from source once per machine (``scripts/install-helm.sh``:
``go install helm.sh/helm/v3/cmd/helm@<pinned>`` into ``.tools/bin``, skipped when
already built at that version). Without a Go toolchain, or when the build fails,
every test that needs helm is skipped with the reason.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deploy_helpers import CHART, KUBE_VERSION, ROOT, RenderError, values_args


@pytest.fixture(scope="session")
def helm_bin() -> str:
    """Path of the pinned helm binary (built on first use; the build takes minutes)."""
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
        pytest.skip("no Go toolchain: cannot build helm (scripts/install-helm.sh)")
    proc = subprocess.run(
        [str(ROOT / "scripts" / "install-helm.sh")], capture_output=True, text=True, timeout=1500, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"building helm failed (scripts/install-helm.sh): {proc.stderr[-1500:]}")
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def render(helm_bin: str) -> Callable[..., list[dict[str, Any]]]:
    """``render(value_set, *extra_args)`` → the rendered objects of ``helm template`` (cached)."""
    cache: dict[tuple[str, ...], list[dict[str, Any]]] = {}

    def _render(value_set: str = "defaults", *extra: str) -> list[dict[str, Any]]:
        key = (value_set, *extra)
        if key not in cache:
            cmd = [
                helm_bin,
                "template",
                "ep",
                str(CHART),
                "--namespace",
                "edge",
                f"--kube-version={KUBE_VERSION}",
                *values_args(value_set),
                *extra,
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
            if proc.returncode != 0:
                raise RenderError(proc.stderr)
            cache[key] = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return cache[key]

    return _render
