"""SSMP on the device (edgepath_agent.ssmp) against real local servers on loopback.

Real parts: two UDP DNS servers (dnslib) on 127.0.0.1, one per "interface", answering different
addresses (127.0.0.2 / 127.0.0.3, both loopback); a real transfer server (the testbed's CdnServer,
meter protocol, MPTCP where the kernel allows) and a real EdgePath service (gRPC). Both "interfaces"
are the loopback device (``SO_BINDTODEVICE lo`` as root, else the source address only) with source
127.0.0.1: nothing leaves loopback. The namespace version with two real paths is
tests/agent/netns/test_agent_ssmp_netns.py.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edgepath_agent.client import connect
from edgepath_agent.ssmp import PathSpec, SsmpClient, SsmpStep, fetch, resolve
from edgepath_agent.testbed.ssmp import CdnServer, start_dns
from service_harness import running_service

HOST = "video.cdn.example"


@pytest.fixture
def cdn() -> Iterator[CdnServer]:
    server = CdnServer("cdn", host="0.0.0.0", port=0).start()
    yield server
    server.close()


@pytest.fixture
def dns_pair() -> Iterator[tuple[Any, Any]]:
    """(wlan0's DNS: answers 127.0.0.2, wwan0's DNS: answers 127.0.0.3) on free loopback ports."""
    a, ra = start_dns("127.0.0.1", 0, "127.0.0.2")
    b, rb = start_dns("127.0.0.1", 0, "127.0.0.3")
    yield (a, ra), (b, rb)
    a.stop()
    b.stop()


def specs(dns_pair: tuple[Any, Any]) -> list[PathSpec]:
    (a, _), (b, _) = dns_pair
    return [
        PathSpec("wlan0", "127.0.0.1", "127.0.0.1", a.server.server_address[1], device="lo"),
        PathSpec("wwan0", "127.0.0.1", "127.0.0.1", b.server.server_address[1], device="lo"),
    ]


def test_each_interface_asks_its_own_dns_server(dns_pair: Any, cdn: CdnServer) -> None:
    client = SsmpClient(specs(dns_pair), cdn.port)
    assert client.resolve_all(HOST) == [("127.0.0.2", "wlan0"), ("127.0.0.3", "wwan0")]
    (_, ra), (_, rb) = dns_pair
    assert (ra.queries, rb.queries) == (1, 1)
    assert resolve("127.0.0.9", specs(dns_pair)[0]) == ["127.0.0.9"]  # a literal address is not looked up


def test_content_block_measures_every_candidate_over_every_path(dns_pair: Any, cdn: CdnServer) -> None:
    client = SsmpClient(specs(dns_pair), cdn.port, rtt_samples=2, default_interface="wwan0")
    content = client.content(HOST, 5_000)
    assert content["expected_size_bytes"] == 5_000 and content["default_interface"] == "wwan0"
    assert [(c["address"], c["dns_interface"]) for c in content["candidates"]] == [
        ("127.0.0.2", "wlan0"),
        ("127.0.0.3", "wwan0"),
    ]
    for cand in content["candidates"]:
        assert [p["interface"] for p in cand["paths"]] == ["wlan0", "wwan0"]
        for p in cand["paths"]:
            assert len(p["rtt_ms_samples"]) == 2
            assert all(0 < r < client.timeout_s * 1000 for r in p["rtt_ms_samples"])  # connected, not timed out
            assert "loss" not in p and "bandwidth_bps" not in p  # nothing measured yet


def test_content_is_measured_over_the_reported_interfaces_only(dns_pair: Any, cdn: CdnServer) -> None:
    """An interface the request leaves out (down, no address) is neither asked nor named: its DNS server gets no
    query, no candidate it answered and no path over it is sent, nor the default interface when it is that one
    (the service refuses a content block naming an interface the request does not list)."""
    client = SsmpClient(specs(dns_pair), cdn.port, rtt_samples=1, default_interface="wwan0")
    (_, ra), (_, rb) = dns_pair
    kept = client.content(HOST, 1000, ["wlan0"])
    assert (ra.queries, rb.queries) == (1, 0)
    assert set(kept) == {"expected_size_bytes", "candidates"}  # no default_interface: wwan0 is not reported
    assert [(c["address"], c["dns_interface"]) for c in kept["candidates"]] == [("127.0.0.2", "wlan0")]
    assert [p["interface"] for p in kept["candidates"][0]["paths"]] == ["wlan0"]
    both = client.content(HOST, 1000, ["wlan0", "wwan0"])  # every path reported: the whole block
    whole = client.content(HOST, 1000)
    for block in (both, whole):
        assert block["default_interface"] == "wwan0"
        assert [(c["dns_interface"], [p["interface"] for p in c["paths"]]) for c in block["candidates"]] == [
            ("wlan0", ["wlan0", "wwan0"]),
            ("wwan0", ["wlan0", "wwan0"]),
        ]
    with pytest.raises(LookupError):
        client.content(HOST, 1000, ["eth0"])  # none of the paths reported
    step = SsmpStep(client, HOST, 1000)
    request = {"device_id": "dev-1", "interfaces": [{"name": "wlan0"}]}
    assert [c["dns_interface"] for c in step.with_content(request)["content"]["candidates"]] == ["wlan0"]
    assert "content" not in step.with_content({"device_id": "dev-1", "interfaces": [{"name": "eth0"}]})


def test_unreachable_candidate_counts_as_timeout(dns_pair: Any) -> None:
    client = SsmpClient(specs(dns_pair), port=1, rtt_samples=1, timeout_s=0.5)  # nothing listens on port 1
    content = client.content(HOST, 10)
    assert content["candidates"][0]["paths"][0]["rtt_ms_samples"] == [500.0]


def test_probe_measures_b_and_p_and_skips_fresh_paths(dns_pair: Any, cdn: CdnServer) -> None:
    client = SsmpClient(specs(dns_pair), cdn.port, probe_bytes=200_000)
    got = client.probe(["127.0.0.2"])
    assert set(got) == {("127.0.0.2", "wlan0"), ("127.0.0.2", "wwan0")}
    for sample in got.values():
        assert sample.bandwidth_bps is not None and sample.bandwidth_bps > 0
        assert sample.loss is not None and 0.0 <= sample.loss <= 1.0
    assert [s.size_bytes for s in cdn.served] == [200_000, 200_000]  # the server saw both probes
    assert client.probe(["127.0.0.2"]) == {}  # fresh: not probed again
    assert len(cdn.served) == 2
    assert len(client.probe(["127.0.0.2"], force=True)) == 2
    content = client.content(HOST, 10)
    measured = content["candidates"][0]["paths"][0]
    assert measured["bandwidth_bps"] > 0 and "loss" in measured  # sent with the next request


def test_download_reports_server_transfer(dns_pair: Any, cdn: CdnServer) -> None:
    client = SsmpClient(specs(dns_pair), cdn.port, bandwidth_min_bytes=1_000_000)
    dl = client.download("127.0.0.3", 1_500_000, "wwan0")
    assert dl.size_bytes == 1_500_000 and dl.local_addr == "127.0.0.1"
    assert dl.server["served_by"] == "cdn"
    st = SsmpClient.server_transfer(dl)
    assert st["address"] == "127.0.0.3" and st["size_bytes"] == 1_500_000 and st["duration_ms"] > 0
    assert len(st["paths"]) == 1 and st["paths"][0]["bandwidth_bps"] > 0  # both specs share 127.0.0.1
    small = SsmpClient.server_transfer(client.download("127.0.0.3", 10_000, "wlan0"))
    assert all("bandwidth_bps" not in p for p in small["paths"])  # mice measure no bandwidth
    with pytest.raises(ValueError, match="eth9"):
        client.download("127.0.0.3", 10, "eth9")


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_fetch_end_to_end_with_a_real_service(dns_pair: Any, cdn: CdnServer, transport: str) -> None:
    """Resolve, measure, ask, probe the listed stale servers, download the pick, report the transfer."""
    client = SsmpClient(specs(dns_pair), cdn.port, probe_bytes=100_000, bandwidth_min_bytes=1_000_000)
    request = {
        "device_id": "phone-ssmp",
        "interfaces": [{"name": "wlan0", "access_type": "WIFI"}, {"name": "wwan0", "access_type": "LTE"}],
    }
    with running_service() as svc:
        service = connect(svc.grpc_url if transport == "grpc" else svc.http_url, timeout_s=5.0)
        try:
            first = fetch(client, service, request, HOST, 2_000_000)
            sel = first.recommendation["server_selection"]
            assert sel["flow_class"] == "ELEPHANT"
            assert sel["rule"] == "elephant_dss_unmeasured"  # B and p not known yet: the default answer
            assert first.download.address == sel["address"] == "127.0.0.2"
            assert set(sel["stale_servers"]) == {"127.0.0.2", "127.0.0.3"}
            assert {k[0] for k in first.probed} == {"127.0.0.2", "127.0.0.3"}
            assert first.ack is not None and first.ack["accepted"] is True
            served = [s.size_bytes for s in cdn.served]
            assert served.count(100_000) == 4 and served[-1] == 2_000_000  # 2 servers × 2 paths probed, then it

            second = fetch(client, service, request, HOST, 2_000_000)
            sel = second.recommendation["server_selection"]
            assert sel["rule"] in ("elephant_q", "elephant_q_tie_random")  # B and p known now: Eq. 2
            assert second.download.address == sel["address"]
            assert second.probed == {}
            stored = svc.call(svc.service.store.get_server_scores(["127.0.0.2"]))["127.0.0.2"]
            assert stored.paths["wlan0"].bandwidth_bps is not None and stored.paths["wlan0"].bandwidth_bps > 0
        finally:
            service.close()


def test_daemon_step_sends_content_downloads_the_pick_and_reports_the_transfer(dns_pair: Any, cdn: CdnServer) -> None:
    """The daemon's hook (Agent(ssmp=SsmpStep)): one step = content in the request, the pick downloaded,
    ``server_transfer`` in the outcome. The applier is the dry-run backend (no root needed here)."""
    from edgepath_agent.applier import Applier, DryRunBackend, Journal, NetState, Route
    from edgepath_agent.collector import StaticCollector
    from edgepath_agent.daemon import Agent, AgentConfig

    routes = NetState(
        limits=(("add_addr_accepted", 0), ("subflows", 0)),
        default_routes=(Route("wlan0", "10.1.1.1", 100), Route("wwan0", "10.1.2.1", 200)),
        sysctls=(("net.ipv4.tcp_congestion_control", "reno"),),
    )
    with running_service() as svc:
        config = AgentConfig(device_id="dev-ssmp", service=[svc.grpc_url], interfaces={"wlan0": "WIFI", "wwan0": "LTE"})
        backend = DryRunBackend(routes, {"wlan0": ["10.1.1.2"], "wwan0": ["10.1.2.2"]}, out=None)
        applier = Applier(backend, Journal(), config.applier_config(), allowed_cc=("reno", "cubic"))
        step = SsmpStep(SsmpClient(specs(dns_pair), cdn.port, probe_bytes=50_000), HOST, 20_000)
        agent = Agent(
            config, connect(svc.grpc_url, 5.0), applier, [StaticCollector(config.interfaces)], ssmp=step, guard=None
        )
        try:
            result = agent.step()
            assert [c["address"] for c in result.request["content"]["candidates"]] == ["127.0.0.2", "127.0.0.3"]
            sel = result.recommendation["server_selection"]
            assert sel["flow_class"] == "MICE"
            assert result.measurement is not None and result.measurement.bytes == 20_000
            assert result.outcome["server_transfer"]["address"] == sel["address"]
            assert result.ack is not None and result.ack["accepted"] is True
            assert cdn.served[-1].size_bytes == 20_000
        finally:
            agent.close(restore=True)


def test_from_config_names_a_network_namespace_it_cannot_enter(caplog: pytest.LogCaptureFixture) -> None:
    """An unusable ``netns`` was logged once per interface as "wlan0 has no IPv4 address (…/run/netns/…)", then
    "SSMP needs at least one interface": it reads as a missing address. Now one error names the namespace.
    ``lo`` has 127.0.0.1 here: only the namespace is at fault."""

    netns = "ep-no-such-ns-0"
    assert not Path(f"/run/netns/{netns}").exists()
    dns = {"lo": "127.0.0.1", "wlan0": "127.0.0.1"}
    with caplog.at_level(logging.WARNING, logger="edgepath_agent.ssmp"):
        with pytest.raises(OSError, match=f"SSMP: cannot enter network namespace '{netns}'") as raised:
            SsmpStep.from_config(list(dns), f"{HOST}:80", 10_000, dns, 1.0, netns=netns)
    assert raised.value.errno == errno.ENOENT and isinstance(raised.value.__cause__, FileNotFoundError)
    assert caplog.records == []  # no per-interface "has no IPv4 address"
    step = SsmpStep.from_config(["lo"], f"{HOST}:80", 10_000, dns, 1.0)  # the same interface, no namespace: usable
    assert [(s.interface, s.source_addr) for s in step.client.paths.values()] == [("lo", "127.0.0.1")]
