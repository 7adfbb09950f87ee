"""Run ``edgepath serve`` as a child process: start, wait until both servers listen, stop.

Shared by the demo, the load-test runner and the deploy tests, which all need a
real service on free loopback ports. Readiness is the ``--ready-file`` the CLI
writes (``{grpc_port, http_port, pid}``) once both servers listen; the wait is
bounded. Stopping sends SIGTERM (clean shutdown), then SIGKILL after a grace
period.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path


class ServeError(RuntimeError):
    """The child exited or did not become ready in time (the message carries the log's tail)."""


def serve_command(ready_file: Path, *extra_args: str, executable: Path | None = None) -> list[str]:
    """argv of ``edgepath serve`` on 127.0.0.1 with free ports and a ready file."""
    exe = executable or Path(sys.executable).with_name("edgepath")
    return [str(exe), "serve", "--host", "127.0.0.1", "--grpc-port", "0", "--http-port", "0",
            "--ready-file", str(ready_file), *extra_args]  # fmt: skip


def start_serve(
    ready_file: Path,
    log_path: Path,
    *extra_args: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    """Start the service and wait (≤ ``timeout_s``) for its ready file; returns (process, ports).

    Raises
    ------
    ServeError
        When the child exits first or is not ready in time (the child is killed then).
    """
    ready_file.unlink(missing_ok=True)
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            serve_command(ready_file, *extra_args),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    deadline = time.monotonic() + timeout_s
    while not ready_file.exists():
        if proc.poll() is not None:
            raise ServeError(f"edgepath serve exited {proc.returncode}: {log_path.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            stop_serve(proc, grace_s=0)
            raise ServeError(f"edgepath serve not ready within {timeout_s:.0f} s; see {log_path}")
        time.sleep(0.05)
    return proc, json.loads(ready_file.read_text())


def stop_serve(proc: subprocess.Popen[bytes], grace_s: float = 30.0) -> int:
    """SIGTERM, then SIGKILL after ``grace_s``; returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@contextlib.contextmanager
def served(
    ready_file: Path, log_path: Path, *extra_args: str, env: Mapping[str, str] | None = None, timeout_s: float = 120.0
) -> Iterator[dict[str, int]]:
    """Context manager around :func:`start_serve` / :func:`stop_serve`; yields the ports."""
    proc, ports = start_serve(ready_file, log_path, *extra_args, env=env, timeout_s=timeout_s)
    try:
        yield ports
    finally:
        stop_serve(proc)
