"""Helpers of the deployment tests (paths, value sets, rendered-object queries)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgepath import launch

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "edgepath"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
#: Kubernetes version the chart is rendered and validated for (within Chart.yaml's kubeVersion).
KUBE_VERSION = "1.34.0"
VALUE_SETS = ["defaults", *[p.name for p in CI_VALUES]]
VENV_BIN = Path(sys.executable).parent


#: The chart's defaults generate keys, which it refuses without a cluster (helm template); the default
#: value set opts into throwaway keys (test_generated_keys_are_refused_without_a_cluster checks the refusal).
DEFAULTS_ARGS = ["--set", "secrets.renderWithoutCluster=generate"]


def values_args(value_set: str) -> list[str]:
    return list(DEFAULTS_ARGS) if value_set == "defaults" else ["-f", str(CHART / "ci" / value_set)]


class RenderError(Exception):
    """``helm template`` refused the values (message = helm's stderr)."""


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if o["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every workload and bare pod."""
    out = []
    for o in objects:
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            out.append((f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]))
        elif o["kind"] == "Pod":
            out.append((f"Pod/{o['metadata']['name']}", o["spec"]))
    return out


@contextlib.contextmanager
def served(tmp_path: Path, *extra_args: str, env: dict[str, str] | None = None) -> Iterator[dict[str, int]]:
    """Run ``edgepath serve`` as a child process on free loopback ports; yield its ready-file contents.

    See :mod:`edgepath.launch`: bounded wait (120 s) for the ready file, stopped by pid (SIGTERM, then SIGKILL).
    """
    with launch.served(tmp_path / "ready.json", tmp_path / "service.log", *extra_args, env=env) as ports:
        yield ports
