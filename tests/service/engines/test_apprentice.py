"""Apprentice mode (issue 18): exact propensities, promotion when the learner is better, never when it is worse.

The replays run the real default learner (``ridge_squarecb``, cold start, refit every 50 outcomes as
the service does) on real paired situations of the test users, with :class:`Apprentice` deciding
what is served. "Better": the baseline is ``lte_first`` (on this data LTE is the faster arm in a
minority of pairs). "Worse": the baseline is ``kernel`` and the device lists the faster interface
first (a kernel whose default route happens to be the faster path: the oracle), so no learner can
beat it. The pairing is of two real single-arm tests of one city, not simultaneous measurements.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from edgepath.engines.apprentice import Apprentice, ApprenticeConfig, baseline_arm
from edgepath.engines.primary_path import BanditConfig, PrimaryPathBandit, TrainingSample, UtilityConfig
from edgepath.evaluation.primary import load_split
from edgepath.evaluation.primary import test_stream as paired_stream
from edgepath.training.offline import ARMS
from edgepath.types import AccessType, InterfaceContext

DATA = Path(__file__).resolve().parents[3] / "service" / "data" / "mobilebandwidth"
#: Promotion must happen within this many outcomes on the "better" replay (stated in the README; measured
#: 2,200-5,100 over pairing seeds 7-12 at the default 5% exploration: the learner's choice matches a served
#: arm it disagrees with the baseline on only in the 2.5% exploration draws, so evidence accrues slowly).
PROMOTE_WITHIN = 5400
#: Pairing seeds concatenated into one replay (≈ 1,800 situations each).
STREAMS = 3


def replay(baseline: str, seed: int, oracle_first: bool = False, explore: float = 0.05) -> tuple[Apprentice, list[int]]:
    """Replay one test stream through apprentice mode; returns the apprentice and the outcome counts at each switch."""
    split = load_split(DATA / "wifi4.csv", DATA / "4G.csv", DATA / "wifi4.csv", DATA / "4G.csv")
    stream = [s for k in range(STREAMS) for s in paired_stream(split, seed * 100 + k)]
    learner = PrimaryPathBandit(BanditConfig(seed=seed))
    app = Apprentice(ApprenticeConfig(baseline=baseline, explore=explore, promote=True, min_outcomes=200, seed=seed))
    utility = UtilityConfig()
    buffer: list[TrainingSample] = []
    switches: list[int] = []
    for i, s in enumerate(stream):
        interfaces = list(s.interfaces)
        if oracle_first and s.cellular.throughput_mbps > s.wifi.throughput_mbps:
            interfaces.reverse()  # the faster path is the device's first-listed (default-route) interface
        choice = learner.decide(interfaces)
        served = app.serve(choice.arms, interfaces, choice.arm_index, choice.probability)
        arm = choice.arms[served.arm_index]
        mbps = s.throughput_mbps(arm)
        app.observe(
            served.arm_index,
            served.propensity,
            choice.arm_index,
            served.baseline_arm_index,
            utility(mbps * 1e6, None, None),
            float(i),
        )
        was = len(switches)
        if app.promoted != (len(switches) % 2 == 1):
            switches.append(i + 1)
        assert len(switches) - was <= 1
        buffer.append(
            TrainingSample(
                choice.features.tolist(), choice.arms, served.arm_index, int(mbps >= 25), served.propensity, mbps * 1e6
            )
        )
        if len(buffer) >= 50:
            learner.update(buffer)
            buffer = []
    return app, switches


def test_served_propensities_are_exact() -> None:
    app = Apprentice(ApprenticeConfig(baseline="wifi_first", explore=0.2, seed=3))
    interfaces = [
        InterfaceContext(name="wwan0", access_type=AccessType.LTE),
        InterfaceContext(name="wlan0", access_type=AccessType.WIFI),
    ]
    arms = (AccessType.WIFI, AccessType.LTE)
    draws = [app.serve(arms, interfaces, 1, 0.5) for _ in range(20_000)]
    assert {(d.arm_index, round(d.propensity, 12)) for d in draws} == {(0, 0.9), (1, 0.1)}
    share_lte = np.mean([d.arm_index == 1 for d in draws])
    assert share_lte == pytest.approx(0.1, abs=0.01)
    assert baseline_arm("kernel", arms, interfaces) == 1 and baseline_arm("lte_first", arms, interfaces) == 1
    with pytest.raises(ValueError, match="explore"):
        Apprentice(ApprenticeConfig(explore=0.0))


@pytest.mark.timeout(120, method="thread")  # reason: a 5,400-outcome real-data replay with the real learner
@pytest.mark.parametrize("seed", [8, 9])
def test_a_better_learner_is_promoted_within_the_stated_outcomes(seed: int) -> None:
    app, switches = replay("lte_first", seed)
    assert switches, f"never promoted: {app.status()}"
    assert switches[0] <= PROMOTE_WITHIN, switches
    event = app.status()["events"][0]
    assert event["event"] == "promoted" and event["learner_ci95"][0] > event["baseline"]


@pytest.mark.timeout(120, method="thread")  # reason: a 5,400-outcome real-data replay with the real learner
@pytest.mark.parametrize("seed", [7, 10])
def test_a_worse_learner_is_never_promoted(seed: int) -> None:
    app, switches = replay("kernel", seed, oracle_first=True)
    assert switches == [], app.status()["events"]
    est = app.status()["estimates"]
    assert est["n"] > 1000 and est["learner"] < est["baseline"]


def test_arms_constant_is_wifi_then_lte() -> None:
    assert ARMS == (AccessType.WIFI, AccessType.LTE)  # the replays above index throughputs in this order


def test_a_running_service_in_apprentice_mode_serves_the_baseline_and_reports_its_estimates() -> None:
    """Real service (REST) with ``mode=apprentice``: baseline served with exact propensities, status and metrics."""
    import httpx
    from service_harness import running_service

    body = {
        "device_id": "phone-1",
        "interfaces": [
            {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
            {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "cqi": 9},
        ],
    }
    with running_service(
        mode="apprentice", apprentice_baseline="lte_first", apprentice_explore=0.2, apprentice_check_every=10
    ) as svc:
        http = httpx.Client(base_url=svc.http_url, timeout=10.0)
        seen = set()
        for _ in range(60):
            rec = http.post("/v1/recommendations", json=body).json()
            pp = rec["primary_path"]
            seen.add((rec["policy"], pp["access_type"], round(pp["propensity"], 9)))
            mbps = 40.0 if pp["access_type"] == "LTE" else 20.0
            report = {"device_id": "phone-1", "decision_id": rec["decision_id"], "throughput_bps": mbps * 1e6}
            assert http.post("/v1/outcomes", json=report).status_code == 200
        assert seen <= {("apprentice:lte_first", "LTE", 0.9), ("apprentice:lte_first", "WIFI", 0.1)}
        assert ("apprentice:lte_first", "LTE", 0.9) in seen
        status = http.get("/v1/status").json()
        assert status["mode"] == "apprentice" and status["serving"] == "baseline"
        assert status["estimates"]["n"] == 60 and status["estimates"]["baseline"] == pytest.approx(0.04, abs=1e-9)
        metrics = http.get("/metrics").text
        gauges = {
            line.split("{")[1].split("}")[0]: float(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith("edgepath_apprentice_value{")
        }
        assert gauges['estimate="baseline"'] == pytest.approx(0.04, abs=1e-9)
        assert gauges['estimate="learner_ci95_low"'] <= gauges['estimate="learner_ips"']
        assert "edgepath_apprentice_serving_learner 0.0" in metrics
