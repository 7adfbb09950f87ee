"""Real EdgePath services on free loopback ports, for any test module (``from service_harness import …``).

``running_service(**settings)`` starts the real composition root (:class:`edgepath.main.Service`:
gRPC + REST servers, in-process store, online trainer) in a background thread with its own event loop,
waits until both servers listen, and stops it on exit. ``service_in_this_loop(settings)`` does the same on the
calling async test's own loop (for tests that also drive the service's store from it); ``is_ready`` /
``is_degraded`` are its ``/readyz`` probes.

This lives in a module of its own name: several directories have a ``conftest.py``, so
``from conftest import …`` resolved to whichever one was imported first and depended on test order.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from edgepath.logs import configure_logging
from edgepath.main import Service
from edgepath.settings import Settings
from edgepath.types import RecommendRequest


@dataclass
class RunningService:
    """A started service: its ports, the Service object, and the loop it runs on."""

    service: Service
    loop: asyncio.AbstractEventLoop
    grpc_port: int
    http_port: int

    @property
    def grpc_url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def call(self, coro: Any, timeout: float = 10.0) -> Any:
        """Run a coroutine on the service's loop (e.g. to wait for a model version)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@contextlib.contextmanager
def running_service(**overrides: Any) -> Iterator[RunningService]:
    """Start a real service with ``Settings(host=127.0.0.1, ports 0, **overrides)``.

    Per-device rate limits are off unless a test sets them: a token bucket refills with the wall clock,
    so a test that sends a few dozen requests as one device would pass or fail with the machine's speed
    (a fast run once exhausted the default burst of 40). The rate-limit tests set their own limits.

    Shedding on event-loop lag is off unless a test sets ``admission_max_lag_ms``: the service runs in a thread
    of the test process, so its loop's lag includes the test's own client time under the GIL and whatever else
    loads the machine, and a shed would answer a test's request by the machine's moment, not by its input (a
    Hypothesis replay once got a 503 where its first run had not: FlakyStrategyDefinition). The tests of lag
    shedding drive :class:`edgepath.admission.Admission` directly; the in-flight bound stays on.
    """
    unlimited: dict[str, Any] = {"rate_limit_per_s": 1e6, "rate_limit_burst": 1_000_000, "admission_max_lag_ms": 1e9}
    settings = Settings(host="127.0.0.1", grpc_port=0, http_port=0, **{**unlimited, **overrides})
    started = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        async def main() -> None:
            service = Service.build(settings)
            box["service"] = service
            box["loop"] = asyncio.get_running_loop()
            task = asyncio.create_task(service.run())
            waiter = asyncio.create_task(service.wait_started())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            started.set()
            await task

        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced to the test below
            box["error"] = exc
            started.set()

    thread = threading.Thread(target=run, name="edgepath-test-service", daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("service did not start within 30 s")
    if "error" in box:
        raise box["error"]
    svc: Service = box["service"]
    try:
        yield RunningService(svc, box["loop"], svc.grpc_port, svc.http_port)
    finally:
        box["loop"].call_soon_threadsafe(svc.stop)
        thread.join(30)


@contextlib.asynccontextmanager
async def service_in_this_loop(settings: Settings, timeout_s: float = 30.0) -> AsyncIterator[Service]:
    """``Service.build(settings)`` run as a task of the calling (async) test's event loop: yields the service once
    it has started (both servers listen, or it serves degraded), stops it on exit and waits for its end.

    Raises
    ------
    TimeoutError
        It did not start, or did not end once stopped, within ``timeout_s`` (s). A service that did not start
        is stopped before the error is raised.
    """
    service = Service.build(settings)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.wait_started(), timeout_s)
    except BaseException:
        service.stop()
        with contextlib.suppress(Exception):  # its own failure, or the bound: the start's error is the one raised
            await asyncio.wait_for(task, timeout_s)
        raise
    try:
        yield service
    finally:
        service.stop()
        await asyncio.wait_for(task, timeout_s)


async def is_ready(http: httpx.AsyncClient) -> bool:
    """``GET /readyz`` answers 200 (the service's ``http`` client)."""
    return (await http.get("/readyz")).status_code == 200


async def is_degraded(http: httpx.AsyncClient) -> bool:
    """``GET /readyz`` answers 503 with ``"degraded": true``: the state store is unreachable, decisions go on."""
    resp = await http.get("/readyz")
    return resp.status_code == 503 and resp.json()["degraded"] is True


def reply_requests() -> list[RecommendRequest]:
    """Requests whose replies fill every section somewhere, for the reply encodings' tests: agent contexts (radio
    readings, subflow histories, kernel lists), a gateway's (sections), a content request, a single-arm device."""
    wlan = {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0, "rtt_ms": 18.0}
    lte = {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9}
    history = {"interface": "wlan0", "rtt_t_ms": [0.0, 500.0, 1000.0, 1500.0], "rtt_ms": [20.0, 22.0, 25.0, 24.0]}
    history |= {"throughput_t_ms": [0.0, 500.0, 1000.0], "throughput_bps": [2e7, 2.2e7, 1.9e7]}
    content = {
        "expected_size_bytes": 50_000_000,
        "candidates": [
            {
                "address": "203.0.113.10",
                "dns_interface": "wlan0",
                "paths": [{"interface": "wlan0", "rtt_ms_samples": [21.0, 23.5], "loss": 0.01}],
            },
            {
                "address": "198.51.100.7",
                "dns_interface": "wwan0",
                "paths": [{"interface": "wwan0", "rtt_ms_samples": [48.0], "bandwidth_bps": 3e7}],
            },
        ],
    }
    bodies: list[dict[str, Any]] = [
        {"device_id": "phone-1", "interfaces": [wlan, lte]},
        {"device_id": "phone-2", "interfaces": [wlan, lte], "subflow_histories": [history]},
        {
            "device_id": "laptop-3",
            "interfaces": [wlan, lte],
            "application_profile": "STREAMING",
            "kernel": {"available_congestion_controls": ["reno", "cubic", "bbr"], "mptcp_schedulers": ["default"]},
        },
        {"device_id": "cpe-4", "interfaces": [wlan, lte], "sections": ["primary_path", "steering"]},
        {"device_id": "tv-5", "interfaces": [wlan, lte], "application_profile": "BULK", "content": content},
        {"device_id": "phone-6", "interfaces": [lte]},
    ]
    return [RecommendRequest.model_validate(b) for b in bodies]


@contextlib.contextmanager
def captured_json_log(level: str) -> Iterator[io.StringIO]:
    """The process's log as JSON lines at ``level`` into a string buffer (:func:`edgepath.logs.configure_logging`),
    the root logger's handlers and level put back afterwards."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    stream = io.StringIO()
    handler = configure_logging(level, "json", stream=stream)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        for h in saved_handlers:
            root.addHandler(h)
        root.setLevel(saved_level)


#: The ``edgepath`` command of this interpreter's environment.
EDGEPATH = Path(sys.executable).with_name("edgepath")


def edgepath_cli(
    *args: str, env_extra: dict[str, str] | None = None, prefix: tuple[str, ...] = (), timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``[*prefix,] edgepath ARGS`` as a process of its own (and its own process group), no ``EDGEPATH_*`` variable
    but ``env_extra`` (stderr a pipe: plain errors). One still running after ``timeout_s`` (it started instead of
    refusing) is killed with its process group (``--workers`` too) and fails the test."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("EDGEPATH_")} | (env_extra or {})
    argv = [*prefix, str(EDGEPATH), *args]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          start_new_session=True) as proc:  # fmt: skip
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"edgepath {' '.join(args)} still running after {timeout_s:.0f} s: it was not refused")
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _own_handlers(root: logging.Logger) -> list[logging.Handler]:
    """The root logger's handlers but pytest's own (its log capture, which it adds and removes around each phase)."""
    return [h for h in root.handlers if not type(h).__module__.startswith("_pytest")]


@contextlib.contextmanager
def root_logging_kept() -> Iterator[None]:
    """Leave the root logger's handlers (but pytest's own) and level as they were on entry, whatever the block
    configured (the suite's autouse fixture, conftest ``_root_logging_restored``)."""
    root = logging.getLogger()
    before, level = _own_handlers(root), root.level
    try:
        yield
    finally:
        for handler in _own_handlers(root):
            if handler not in before:
                root.removeHandler(handler)
        for handler in before:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
