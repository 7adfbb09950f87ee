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

#: Time a test that needs helm may take: the first one, whichever the random order makes it, builds
#: helm from source inside its own setup (minutes with a cold Go cache; the build's own bound is 1500 s).
HELM_BUILD_TIMEOUT_S = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test that uses ``helm_bin`` (directly or through ``render``) the helm build's time.

    The suite's default timeout (60 s) also bounds fixture setup, so whichever helm test ran first on a
    fresh clone failed in setup and the cached error failed every later one. A longer mark set on the
    test itself (e.g. a locust run's) is kept.
    """
    for item in items:
        if "helm_bin" not in getattr(item, "fixturenames", ()):
            continue
        mark = item.get_closest_marker("timeout")
        if mark is None or not mark.args or (mark.args[0] or 0) < HELM_BUILD_TIMEOUT_S:
            item.add_marker(pytest.mark.timeout(HELM_BUILD_TIMEOUT_S), append=False)


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
