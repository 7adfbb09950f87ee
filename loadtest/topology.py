"""Processes the load-test scripts start on loopback: free ports, a throw-away ``redis-server``, an ``edgepath train``.

Shared by ``loadtest/bench``, ``loadtest/training_interference.py`` and ``loadtest/soak`` (which starts its own,
persistent redis-server and uses :func:`free_port` only).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path


def free_port() -> int:
    """A TCP port nothing listens on right now on 127.0.0.1 (the OS's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout_s: float = 30.0) -> None:
    """Return once something accepts TCP connections on 127.0.0.1:``port``.

    Raises
    ------
    RuntimeError
        Nothing listens after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s") from None
            time.sleep(0.05)


def start_redis_server(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A ``redis-server`` without persistence on a free loopback port, its files in ``workdir``; returns the
    process and its ``redis://`` URL once it accepts connections.

    Raises
    ------
    SystemExit
        ``redis-server`` is not on ``PATH`` (``scripts/setup.sh`` installs it from apt).
    """
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not on PATH (scripts/setup.sh installs it from apt)")
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(port)
    return proc, f"redis://127.0.0.1:{port}/0"


def start_trainer(store_url: str, log_path: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """``edgepath train --store store_url --batch-size 50`` (the venv's, beside this interpreter), its output in
    ``log_path``, with ``env`` added to this process's environment (e.g. ``EDGEPATH_HMAC_KEY``)."""
    with open(log_path, "wb") as out:
        return subprocess.Popen(
            [
                *(str(Path(sys.executable).parent / "edgepath"), "train", "--store", store_url),
                *("--batch-size", "50", "--log-level", "WARNING"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
