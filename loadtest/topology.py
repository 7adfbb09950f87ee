"""Processes the load-test scripts start on loopback: free ports, a throw-away ``redis-server``, an ``edgepath train``.

Shared by ``loadtest/bench``, ``loadtest/training_interference.py`` and ``loadtest/soak`` (which starts its own,
persistent redis-server and uses :func:`free_port` and :func:`wait_redis` only).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def free_port() -> int:
    """A TCP port nothing listens on right now on 127.0.0.1 (the OS's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_redis(url: str, timeout_s: float = 30.0) -> None:
    """Return once the ``redis-server`` at ``url`` answers ``PING`` (redis-py, retried with tenacity; a server
    still loading its append-only file answers ``LOADING``, a connection error, and is waited for too).

    Raises
    ------
    redis.exceptions.ConnectionError
        No answer after ``timeout_s`` seconds.
    """
    import redis
    from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

    client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type((redis.ConnectionError, redis.TimeoutError)),
            stop=stop_after_delay(timeout_s),
            wait=wait_fixed(0.05),
            reraise=True,
        ):
            with attempt:
                client.ping()
    finally:
        client.close()


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
    url = f"redis://127.0.0.1:{port}/0"
    wait_redis(url)
    return proc, url


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
