"""Contract cases for the edge's congestion measurements (issue 20), over REST and gRPC (agent clients).

Outcomes carry ``congestion_measurement``; the service counts it once per decision per (profile, algorithm)
and the next recommendation's ``congestion`` follows the edge's best algorithm exactly when the measurements
refute the table's advice (engines.congestion.advise_with_edge). The service here re-reads the statistics on
every request (``congestion.edge_refresh_s = 0``) so that the very next recommendation shows them; the refresh
interval itself is covered in tests/service/test_cc_edge_adapter.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from edgepath.engines.congestion import MIN_EDGE_TRANSFERS
from edgepath_agent.client import RestServiceClient, ServiceClient, ServiceError
from service_harness import RunningService, running_service

KERNEL = {"available_congestion_controls": ["reno", "cubic", "bbr"]}
CONTEXT: dict[str, Any] = {
    "device_id": "cpe-20",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -58.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -95.0},
    ],
    "application_profile": "BULK",
    "kernel": KERNEL,
}
CODES = {"rest": 422, "grpc": "INVALID_ARGUMENT"}


@pytest.fixture
def service() -> Iterator[RunningService]:
    """A service that re-reads the edge statistics on every request (overrides tests/conftest.py's)."""
    # batch_size: no online refit (a process of its own) competes with these calls on a loaded machine
    with running_service(batch_size=100_000, congestion={"edge_refresh_s": 0.0}) as running:
        yield running


def measured(client: ServiceClient, algorithm: str, throughputs_mbps: list[float]) -> list[str]:
    """One decision per value, each reported with a measurement of ``algorithm``; returns the decision ids."""
    ids = []
    for mbps in throughputs_mbps:
        rec = client.recommend(CONTEXT)
        ack = client.report_outcome(
            {
                "device_id": CONTEXT["device_id"],
                "decision_id": rec["decision_id"],
                "throughput_bps": 5e6,
                "congestion_measurement": {
                    "algorithm": algorithm,
                    "throughput_bps": mbps * 1e6,
                    "hol_degree_ms": 20.0,
                    "protocol_delay_ms": 80.0,
                    "drop_rate": 0.01,
                },
            }
        )
        assert ack["accepted"] is True
        ids.append(rec["decision_id"])
    return ids


def spread(mean: float, n: int = MIN_EDGE_TRANSFERS) -> list[float]:
    return [mean + 0.2 * ((i % 5) - 2) for i in range(n)]  # mean ± 0.4, s ≈ 0.15


def test_table_advice_for_this_kernel_is_cubic(client: ServiceClient) -> None:
    cong = client.recommend(CONTEXT)["congestion"]
    assert cong["subflow_level"] == "cubic"
    assert "edge measurements" not in cong["explanation"]


def test_measurements_that_refute_the_advice_override_it(client: ServiceClient) -> None:
    measured(client, "cubic", spread(8.0))
    measured(client, "reno", spread(15.0))
    cong = client.recommend(CONTEXT)["congestion"]
    assert cong["subflow_level"] == "reno"
    assert cong["deciding_metric"] == "throughput_avg_mbps"
    assert cong["deciding_value"] == pytest.approx(15.0)
    assert "edge measurements override" in cong["explanation"]
    assert f"over {MIN_EDGE_TRANSFERS} transfers" in cong["explanation"]
    # the override is per profile: another profile's advice is the table's
    other = client.recommend({**CONTEXT, "application_profile": "STREAMING"})["congestion"]
    assert other["subflow_level"] == "cubic" and "edge measurements" not in other["explanation"]


def test_measurements_that_do_not_refute_the_advice_leave_it_alone(client: ServiceClient) -> None:
    measured(client, "cubic", spread(15.9))
    measured(client, "reno", spread(16.0))  # better mean, but cubic lies within reno's 95 % CI
    cong = client.recommend(CONTEXT)["congestion"]
    assert cong["subflow_level"] == "cubic"
    assert "edge measurements" not in cong["explanation"]


def test_an_algorithm_the_kernel_does_not_offer_is_never_advised(client: ServiceClient) -> None:
    measured(client, "cubic", spread(8.0))
    measured(client, "westwood", spread(30.0))
    assert client.recommend(CONTEXT)["congestion"]["subflow_level"] == "cubic"


def test_a_duplicate_outcome_is_not_counted_twice(client: ServiceClient, service: RunningService) -> None:
    measured(client, "reno", spread(15.0))
    ids = measured(client, "cubic", spread(8.0, MIN_EDGE_TRANSFERS - 1))
    repeat = {
        "device_id": CONTEXT["device_id"],
        "decision_id": ids[-1],
        "throughput_bps": 5e6,
        "congestion_measurement": {"algorithm": "cubic", "throughput_bps": 8e6},
    }
    assert client.report_outcome(repeat)["duplicate"] is True
    stats = service.call(service.service.store.cc_measurement_stats("BULK"))
    assert stats["cubic"]["throughput_avg_mbps"].count == MIN_EDGE_TRANSFERS - 1
    # cubic has one transfer too few: the advice stands until a new decision adds it
    assert client.recommend(CONTEXT)["congestion"]["subflow_level"] == "cubic"
    measured(client, "cubic", [8.0])
    assert client.recommend(CONTEXT)["congestion"]["subflow_level"] == "reno"


def _report_raw(client: ServiceClient, body: dict[str, Any]) -> Any:
    """Report through the client; NaN goes raw over REST (httpx refuses to encode it)."""
    m = body["congestion_measurement"]
    if isinstance(client, RestServiceClient) and any(isinstance(v, float) and not math.isfinite(v) for v in m.values()):
        resp = httpx.post(
            client.url + "/v1/outcomes", content=json.dumps(body), headers={"content-type": "application/json"}
        )
        detail = resp.json()
        raise ServiceError(resp.status_code, f"{detail.get('field')} {detail.get('message')}")
    return client.report_outcome(body)


@pytest.mark.parametrize(
    ("measurement", "field"),
    [
        ({"algorithm": "cubic", "protocol_delay_ms": math.nan}, "congestion_measurement.protocol_delay_ms"),
        ({"algorithm": "cubic", "throughput_bps": -1.0}, "congestion_measurement.throughput_bps"),
        ({"algorithm": "cubic", "protocol_delay_ms": -0.5}, "congestion_measurement.protocol_delay_ms"),
        ({"algorithm": "cubic", "drop_rate": 1.01}, "congestion_measurement.drop_rate"),
        ({"algorithm": "cubic", "hol_degree_ms": 1e9}, "congestion_measurement.hol_degree_ms"),
        ({"algorithm": "", "drop_rate": 0.1}, "congestion_measurement.algorithm"),
        ({"algorithm": "c" * 33, "drop_rate": 0.1}, "congestion_measurement.algorithm"),
        ({"algorithm": "cubic; reboot", "drop_rate": 0.1}, "congestion_measurement.algorithm"),
    ],
)
def test_bad_measurements_are_invalid_naming_the_field(
    client: ServiceClient, transport: str, service: RunningService, measurement: dict[str, Any], field: str
) -> None:
    rec = client.recommend(CONTEXT)
    body = {
        "device_id": CONTEXT["device_id"],
        "decision_id": rec["decision_id"],
        "throughput_bps": 5e6,
        "congestion_measurement": measurement,
    }
    with pytest.raises(ServiceError) as err:
        _report_raw(client, body)
    assert err.value.code == CODES[transport]
    assert field in err.value.message
    assert service.call(service.service.store.cc_measurement_stats("BULK")) == {}
