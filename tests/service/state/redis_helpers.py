"""Helpers of the state-store tests: a real ``redis-server`` child process, records to store, a trained model."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from edgepath.engines.features import N_FEATURES
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit, TrainingSample
from edgepath.state.base import DecisionRecord, OutcomeRecord
from edgepath.types import AccessType

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_for(condition: Callable[[], Awaitable[Any]], timeout_s: float = 15.0) -> Any:
    """Poll the async ``condition`` every 20 ms until it is truthy and return its value; ``TimeoutError`` after
    ``timeout_s`` (a bound on a wait for a state, never a sleep for timing)."""
    async with asyncio.timeout(timeout_s):
        while True:
            value = await condition()
            if value:
                return value
            await asyncio.sleep(0.02)


def wait_until(condition: Callable[[], Any], timeout_s: float, interval_s: float = 0.02, what: str = "") -> Any:
    """Poll ``condition`` until it returns a truthy value; raise ``TimeoutError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what or condition}")
        time.sleep(interval_s)


class RedisServer:
    """A ``redis-server`` child process on ``127.0.0.1:port``."""

    def __init__(self, directory: Path, appendonly: bool = False) -> None:
        self.directory = directory
        self.appendonly = appendonly
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> RedisServer:
        assert REDIS_SERVER is not None
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        args += ["--save", "", "--appendonly", "yes" if self.appendonly else "no", "--protected-mode", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self._ping() or self.proc.poll() is not None, 10, what="redis-server to answer PING")
        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.proc.returncode} (port {self.port} taken?)")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # in case a test left it stopped
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: connections stay open but nothing answers (like a hung or partitioned server)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)


def decision(decision_id: str, device_id: str = "dev-1") -> DecisionRecord:
    """A WiFi/LTE decision record with made-up features (N_FEATURES long)."""
    return DecisionRecord(
        decision_id=decision_id,
        device_id=device_id,
        model_version=3,
        policy="active_explorer",
        arms=("WIFI", "LTE"),
        arm_index=1,
        interface="wwan0",
        propensity=0.85,
        # full-length vector: the engine drops outcomes with a malformed feature vector (issue 15)
        features=(0.5, -1.25, 0.0, 3.0) + (0.0,) * (N_FEATURES - 4),
        decided_at=time.time(),
        link_speed_mbps=(144.0, None),
        application_profile="STREAMING",
        congestion_controls=("reno", "cubic", "bbr"),
    )


def outcome(d: DecisionRecord, throughput_bps: float = 3e7, latency_ms: float | None = 40.0) -> OutcomeRecord:
    """The outcome of ``d`` (reward 1)."""
    return OutcomeRecord(
        decision_id=d.decision_id,
        device_id=d.device_id,
        model_version=d.model_version,
        arms=d.arms,
        arm_index=d.arm_index,
        propensity=d.propensity,
        features=d.features,
        throughput_bps=throughput_bps,
        latency_ms=latency_ms,
        loss=None,
        reward=1,
        reported_at=time.time(),
        extra={"rtt_ms": 12.5},
    )


def trained_bandit(n: int = 60, seed: int = 0) -> PrimaryPathBandit:
    """A primary-path model (default policy) trained on ``n`` synthetic WiFi/LTE samples: a snapshot to publish."""
    model = PrimaryPathBandit(BanditConfig(seed=seed))
    samples = [
        TrainingSample(
            features=[float(i % 7), float(i % 3)] + [0.0] * (N_FEATURES - 2),
            arms=(AccessType.WIFI, AccessType.LTE),
            arm_index=i % 2,
            reward=int(i % 5 == 0),
            propensity=0.5,
        )
        for i in range(n)
    ]
    model.update(samples)
    return model
