"""What the ATSSS steering section costs per decision: DecisionPlane.recommend with and without its adapter.

In-process (memory store, no transport), same requests, same run: prints µs per decision for the
registered engines with and without ``SteeringAdapter``, with and without an MTS session for the device,
and their ratio to the baseline. Usage: ``.venv/bin/python scripts/bench_steering.py [--n 3000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from edgepath.adapters import registry
from edgepath.adapters.steering import SteeringAdapter
from edgepath.main import Service
from edgepath.settings import Settings
from edgepath.state.base import MtsSession
from edgepath.types import Principal, RecommendRequest

REQUEST = RecommendRequest.model_validate(
    {
        "device_id": "bench-1",
        "interfaces": [
            {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -60, "rtt_ms": 40, "loss": 0.01},
            {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95, "rtt_ms": 25, "loss": 0.001},
        ],
    }
)


async def per_decision_us(with_steering: bool, with_session: bool, n: int, repeats: int = 5) -> float:
    factories = registry.ENGINES if with_steering else tuple(f for f in registry.ENGINES if f is not SteeringAdapter)
    service = Service.build(Settings(host="127.0.0.1", grpc_port=0, http_port=0))
    plane = service.plane
    plane.engines = registry.build_engines(service.settings, factories)
    if with_session:
        info = {"mtsMode": 1, "requestType": 0, "flowFilter": [{"dstIp": "192.0.2.1"}], "qosD": {}}
        await plane.store.put_mts_session(MtsSession("s1", "bench-1", json.dumps(info), 1.0))
    who = Principal(device_id="bench-1")
    for _ in range(200):  # warm-up
        await plane.recommend(who, REQUEST)
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            await plane.recommend(who, REQUEST)
        runs.append((time.perf_counter() - start) / n * 1e6)
    await plane.store.close()
    return statistics.median(runs)


async def main(n: int) -> None:
    base = await per_decision_us(False, False, n)
    rows = [("without steering (baseline)", base)]
    rows.append(("with steering, no session", await per_decision_us(True, False, n)))
    rows.append(("with steering, mtsMode 1 session", await per_decision_us(True, True, n)))
    for name, us in rows:
        print(f"{name:34s} {us:8.1f} µs/decision  ratio {us / base:5.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="decisions per timed run (median of 5 runs)")
    asyncio.run(main(parser.parse_args().n))
