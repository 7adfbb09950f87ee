"""The garbage collector held off while a RecommendBatch keeps its objects alive (issue 16, edgepath.collector).

Unit cases drive :class:`~edgepath.collector.CollectorPause` with a held clock (no real time passes). The end-to-end
case sends a batch of 64 agent contexts (two interfaces, 20 samples per column) to the real gRPC and HTTP servers and
counts, with a ``gc.callbacks`` probe, the collections that start between the handler's decoding and its encoding:
none, and the collector is on again once the service's loop has turned. The same batch with the pause replaced by
a no-op block starts collections in that window, so the case measures the pause, not a batch too small to matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import orjson
import pytest
from edgepath import collector
from edgepath.collector import CollectorPause
from edgepath_agent.wire import edgepath_pb2 as pb
from edgepath_agent.wire import edgepath_pb2_grpc as pb_grpc
from service_harness import RunningService, running_service


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    """Every case starts with the collector on and leaves it as it found it."""
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_outside_a_loop_the_collector_is_off_inside_the_block_and_on_after_it() -> None:
    pause = CollectorPause()
    with pause:
        assert not gc.isenabled()
        with pause:  # re-entrant
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled() and pause.open_blocks == 0 and not pause.holding


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    pause = CollectorPause()
    with pause:
        pass
    assert not gc.isenabled() and not pause.holding


def test_on_a_loop_the_collector_comes_back_on_the_next_turn_after_the_last_block() -> None:
    pause = CollectorPause()

    async def run() -> list[bool]:
        seen = []
        with pause:
            with pause:
                pass
            await asyncio.sleep(0)  # a turn of the loop with a block still open: still held
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())  # the handler's frame still holds its objects here
        await asyncio.sleep(0)
        seen.append(gc.isenabled())
        return seen

    assert asyncio.run(run()) == [False, False, True]


def test_a_block_opened_before_the_give_back_runs_keeps_the_collector_held() -> None:
    pause = CollectorPause()

    async def run() -> list[bool]:
        seen = []
        with pause:
            pass  # give-back scheduled
        with pause:  # opened before the loop turns
            await asyncio.sleep(0)  # the scheduled give-back runs and finds a block open
            seen.append(gc.isenabled())
        await asyncio.sleep(0)
        seen.append(gc.isenabled())
        return seen

    assert asyncio.run(run()) == [False, True]


def test_overlapping_blocks_give_the_collector_back_once_held_max_hold_s() -> None:
    clock = Clock()
    pause = CollectorPause(max_hold_s=0.25, clock=clock)

    async def run() -> list[bool]:
        seen = []
        pause.__enter__()  # a batch that stays open throughout
        with pause:
            clock.now += 0.2
        await asyncio.sleep(0)
        seen.append(gc.isenabled())  # held 0.2 s < 0.25 s: still held
        with pause:
            clock.now += 0.1
        await asyncio.sleep(0)
        seen.append(gc.isenabled())  # held 0.3 s: given back although a block is open
        with pause:  # the next block holds it off again, from now
            seen.append(gc.isenabled())
        pause.__exit__(None, None, None)
        await asyncio.sleep(0)
        seen.append(gc.isenabled())
        return seen

    assert asyncio.run(run()) == [False, True, False, True]


@pytest.mark.parametrize("max_hold_s", [0.0, -1.0, float("inf"), float("nan")])
def test_max_hold_must_be_finite_and_positive(max_hold_s: float) -> None:
    with pytest.raises(ValueError, match="max_hold_s"):
        CollectorPause(max_hold_s=max_hold_s)


# --- end to end: real servers ---------------------------------------------------------------------------------------


def agent_context(i: int) -> dict[str, Any]:
    """An agent's context: WiFi + LTE readings and 20 RTT and throughput samples per subflow, as columns."""
    t = [1_700_000_000_000.0 + 500.0 * k for k in range(20)]
    return {
        "device_id": f"cpe-client-{i}",
        "interfaces": [
            {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -50.0 - i % 30, "link_speed_mbps": 144.0},
            {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -100.0, "rsrq_db": -11.0, "sinr_db": float(i % 20)},
        ],
        "subflow_histories": [
            {
                "interface": name,
                "rtt_t_ms": t,
                "rtt_ms": [base + (k * i) % 7 for k in range(20)],
                "throughput_t_ms": t,
                "throughput_bps": [1e6 * (base + k % 5) for k in range(20)],
            }
            for name, base in (("wlan0", 20.0), ("wwan0", 45.0))
        ],
    }


BATCH = [agent_context(i) for i in range(64)]
ACCESS = {"WIFI": pb.ACCESS_TYPE_WIFI, "LTE": pb.ACCESS_TYPE_LTE}


def send(service: RunningService, transport: str) -> int:
    """One RecommendBatch of :data:`BATCH`; returns the number of recommendations."""
    if transport == "rest":
        resp = httpx.post(
            service.http_url + "/v1/recommendations/batch",
            content=orjson.dumps({"requests": BATCH}),
            headers={"content-type": "application/json"},
            timeout=30.0,
        )
        assert resp.status_code == 200, resp.text
        return len(resp.json()["recommendations"])
    msg = pb.RecommendBatchRequest()
    for body in BATCH:
        item = msg.requests.add(device_id=body["device_id"])
        for iface in body["interfaces"]:
            item.interfaces.add(**{**iface, "access_type": ACCESS[iface["access_type"]]})
        for h in body["subflow_histories"]:
            item.subflow_histories.add(**h)
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        return len(pb_grpc.PathServiceStub(channel).RecommendBatch(msg, timeout=30.0).recommendations)


class Window:
    """Counts the collections that start between a batch handler's decoding and the end of its encoding."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, transport: str) -> None:
        self.open, self.collections = False, 0
        if transport == "rest":
            from edgepath.rest import app as module

            decode, encode = "parse_body", "recommendation_response"
        else:
            from edgepath.grpc import convert as module

            decode, encode = "recommend_batch_request", "recommendation_batch_wire"
        for name, opens in ((decode, True), (encode, False)):
            monkeypatch.setattr(module, name, self._marking(getattr(module, name), opens))

    def _marking(self, fn: Any, opens: bool) -> Any:
        def marked(*args: Any, **kwargs: Any) -> Any:
            if opens:
                self.open = True
            try:
                return fn(*args, **kwargs)
            finally:
                if not opens:
                    self.open = False

        return marked

    def probe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start" and self.open:
            self.collections += 1


@contextlib.contextmanager
def probing(window: Window) -> Iterator[None]:
    gc.callbacks.append(window.probe)
    try:
        yield
    finally:
        gc.callbacks.remove(window.probe)


async def _turn() -> None:
    await asyncio.sleep(0)


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_no_collection_starts_inside_a_batch_and_the_collector_is_back_after_it(
    monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    window = Window(monkeypatch, transport)
    with running_service() as service, probing(window):
        send(service, transport)  # warm: first-call imports and caches
        held = []
        for _ in range(3):
            assert send(service, transport) == 64
            service.call(_turn())  # a turn of the service's loop after the reply: the give-back has run
            held.append(gc.isenabled())
        assert window.collections == 0
        assert held == [True, True, True]
        # the same batches without the pause: the collector starts in the window (what the pause saves)
        module = "edgepath.rest.app" if transport == "rest" else "edgepath.grpc.server"
        monkeypatch.setattr(f"{module}.BATCH_COLLECTOR_PAUSE", contextlib.nullcontext())
        for _ in range(3):
            send(service, transport)
        assert window.collections > 0
    assert collector.BATCH_COLLECTOR_PAUSE.open_blocks == 0
