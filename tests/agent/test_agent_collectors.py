"""Collector parsers on hand-written samples of `iw`, `mmcli -J`, `ss -ti` output (fixtures/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_fixtures import fixture
from edgepath_agent.collector import (
    ModemCollector,
    PathCollector,
    StaticCollector,
    WifiCollector,
    merge_contexts,
    parse_interface_map,
    read_capabilities,
)
from edgepath_agent.collector.base import run_tool
from edgepath_agent.collector.modem import parse_modem_info, parse_modem_list, parse_signal
from edgepath_agent.collector.path import parse_ip_addr_json, parse_ss_tin, path_metrics
from edgepath_agent.collector.wifi import parse_iw_dev, parse_iw_link


def test_iw_dev_lists_interfaces():
    assert parse_iw_dev(fixture("iw_dev.txt")) == ["wlan1", "wlan0"]


def test_iw_link_vht_uses_tx_bitrate_and_float_freq():
    assert parse_iw_link(fixture("iw_link_5ghz.txt")) == {
        "access_type": "WIFI",
        "wifi_rssi_dbm": -52.0,
        "link_speed_mbps": 780.0,
        "frequency_mhz": 5180.0,
    }


def test_iw_link_falls_back_to_rx_bitrate():
    got = parse_iw_link(fixture("iw_link_2ghz_rx_only.txt"))
    assert got["link_speed_mbps"] == 65.0 and got["frequency_mhz"] == 2437.0 and got["wifi_rssi_dbm"] == -71.0


def test_iw_link_not_connected_reports_nothing():
    assert parse_iw_link(fixture("iw_link_not_connected.txt")) == {}


def test_wifi_collector_skips_unassociated_interfaces():
    outputs = {
        ("iw", "dev"): fixture("iw_dev.txt"),
        ("iw", "dev", "wlan0", "link"): fixture("iw_link_5ghz.txt"),
        ("iw", "dev", "wlan1", "link"): fixture("iw_link_not_connected.txt"),
    }
    readings = WifiCollector(runner=lambda argv: outputs.get(tuple(argv))).collect()
    assert list(readings) == ["wlan0"]
    assert readings["wlan0"]["wifi_rssi_dbm"] == -52.0


def test_text_collectors_run_their_tools_inside_netns():
    """With ``netns`` (the agent's ``--netns``) ``iw``, ``ss`` and ``ip`` run under ``ip netns exec NAME``."""
    ns = ["ip", "netns", "exec", "ep-dev"]
    outputs = {
        (*ns, "iw", "dev"): fixture("iw_dev.txt"),
        (*ns, "iw", "dev", "wlan0", "link"): fixture("iw_link_5ghz.txt"),
        (*ns, "iw", "dev", "wlan1", "link"): fixture("iw_link_not_connected.txt"),
        (*ns, "ss", "-tinH", "state", "established"): fixture("ss_tin.txt"),
        (*ns, "ip", "-j", "addr", "show"): fixture("ip_addr.json"),
    }
    run = lambda argv: outputs.get(tuple(argv))  # noqa: E731
    assert list(WifiCollector(runner=run, netns="ep-dev").collect()) == ["wlan0"]
    assert WifiCollector(runner=run).collect() == {}  # the host's iw is not asked
    assert PathCollector(runner=run, netns="ep-dev").collect() == path_metrics(
        parse_ss_tin(fixture("ss_tin.txt")), parse_ip_addr_json(fixture("ip_addr.json"))
    )
    assert PathCollector(runner=run).collect() == {}


def test_mmcli_lte_modem():
    assert parse_modem_list(fixture("mmcli_list.json")) == ["0", "3"]
    assert parse_modem_info(fixture("mmcli_modem0_lte.json")) == ("wwan0", "LTE")
    assert parse_signal(fixture("mmcli_signal0_lte.json"), "LTE") == {
        "rsrp_dbm": -97.0,
        "rsrq_db": -11.0,
        "sinr_db": 8.2,
        "cell_rssi_dbm": -68.0,
    }


def test_mmcli_nr_prefers_5g_block_and_fills_from_lte():
    assert parse_modem_info(fixture("mmcli_modem3_nr.json")) == ("wwan1", "NR")
    got = parse_signal(fixture("mmcli_signal3_nr.json"), "NR")
    assert got == {"rsrp_dbm": -89.0, "rsrq_db": -10.5, "sinr_db": 15.5, "cell_rssi_dbm": -70.0, "cqi": 9}


def test_modem_collector_end_to_end_on_samples():
    outputs = {
        ("mmcli", "-L", "-J"): fixture("mmcli_list.json"),
        ("mmcli", "-m", "0", "-J"): fixture("mmcli_modem0_lte.json"),
        ("mmcli", "-m", "0", "--signal-get", "-J"): fixture("mmcli_signal0_lte.json"),
        ("mmcli", "-m", "3", "-J"): fixture("mmcli_modem3_nr.json"),
        ("mmcli", "-m", "3", "--signal-get", "-J"): None,  # signal not set up: access type only
    }
    readings = ModemCollector(runner=lambda argv: outputs.get(tuple(argv))).collect()
    assert readings["wwan0"]["access_type"] == "LTE" and readings["wwan0"]["rsrp_dbm"] == -97.0
    assert readings["wwan1"] == {"access_type": "NR"}


def test_absent_tools_report_nothing():
    missing = lambda argv: None  # noqa: E731
    assert WifiCollector(runner=missing).collect() == {}
    assert ModemCollector(runner=missing).collect() == {}
    assert PathCollector(runner=missing).collect() == {}
    assert run_tool(["edgepath-no-such-tool-xyz"]) is None


def test_ss_tcp_info_to_path_metrics():
    sockets = parse_ss_tin(fixture("ss_tin.txt"))
    assert [s.local_addr for s in sockets] == ["10.1.1.2", "10.1.2.2", "127.0.0.1"]
    assert sockets[0].mptcp_subflow and sockets[0].rtt_ms == 22.5 and sockets[0].total_retrans == 4
    readings = path_metrics(sockets, parse_ip_addr_json(fixture("ip_addr.json")))
    assert readings == {"wlan0": {"rtt_ms": 22.5, "loss": 0.04}, "wwan0": {"rtt_ms": 40.0, "loss": 0.0}}


def test_ss_with_state_column():
    text = "ESTAB 0 0 10.1.1.2:1 10.1.0.1:2\n\t rtt:1.5/0.5 segs_out:10 retrans:0/1\n"
    (s,) = parse_ss_tin(text)
    assert (s.local_addr, s.peer_addr, s.rtt_ms, s.segs_out) == ("10.1.1.2", "10.1.0.1", 1.5, 10)


def test_merge_contexts_priority_and_filter():
    merged = merge_contexts(
        [
            {"wlan0": {"access_type": "WIFI", "wifi_rssi_dbm": -50.0}},
            {"wlan0": {"wifi_rssi_dbm": -90.0, "rtt_ms": 5.0}},
            {"eth9": {"rtt_ms": 1.0}},
        ],
    )
    assert merged == [{"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -50.0, "rtt_ms": 5.0}]
    both = merge_contexts([StaticCollector({"wwan0": "LTE", "wlan0": "WIFI"}).collect()], only=["wlan0", "wwan0"])
    assert [i["name"] for i in both] == ["wlan0", "wwan0"]


def test_interface_map_errors_name_the_item():
    assert parse_interface_map(["wlan0=wifi", "wwan0=LTE"]) == {"wlan0": "WIFI", "wwan0": "LTE"}
    with pytest.raises(ValueError, match="wwan0=4G"):
        parse_interface_map(["wwan0=4G"])


def test_kernel_capabilities_from_a_proc_tree(tmp_path: Path):
    (tmp_path / "net" / "mptcp").mkdir(parents=True)
    (tmp_path / "net" / "ipv4").mkdir(parents=True)
    (tmp_path / "net" / "mptcp" / "enabled").write_text("1\n")
    (tmp_path / "net" / "mptcp" / "available_schedulers").write_text("default\n")
    (tmp_path / "net" / "ipv4" / "tcp_available_congestion_control").write_text("reno bbr cubic\n")
    (tmp_path / "net" / "ipv4" / "tcp_allowed_congestion_control").write_text("reno bbr\n")
    (tmp_path / "net" / "ipv4" / "tcp_congestion_control").write_text("bbr\n")
    caps = read_capabilities(tmp_path)
    assert caps.mptcp_enabled and caps.schedulers == ("default",)
    assert caps.allowed_cc == ("reno", "bbr") and caps.available_cc == ("reno", "bbr", "cubic")
    assert caps.current_cc == "bbr"
    empty = read_capabilities(tmp_path / "nowhere")
    assert not empty.mptcp_enabled and empty.allowed_cc == ()


def test_fixture_json_is_valid():
    for name in ("mmcli_list.json", "mmcli_modem0_lte.json", "mmcli_signal3_nr.json"):
        json.loads(fixture(name))


def _modem_off_until_setup(calls: list[tuple[str, ...]], setup_works: bool = True):
    """A ModemManager whose extended signal is off (rate 0, values "--") until ``--signal-setup``."""
    state = {"on": False}
    off = json.dumps({"modem": {"signal": {"refresh": {"rate": "0"}, "lte": {"rsrp": "--", "rsrq": "--"}}}})

    def run(argv):
        calls.append(tuple(argv))
        key = tuple(argv)
        if key == ("mmcli", "-L", "-J"):
            return fixture("mmcli_list.json")
        if key == ("mmcli", "-m", "0", "-J"):
            return fixture("mmcli_modem0_lte.json")
        if key == ("mmcli", "-m", "0", "--signal-setup=10"):
            state["on"] = setup_works
            return "successfully setup signal refresh rate\n" if setup_works else None
        if key == ("mmcli", "-m", "0", "--signal-get", "-J"):
            return fixture("mmcli_signal0_lte.json") if state["on"] else off
        return None

    return run


def test_modem_collector_enables_extended_signal_once_when_allowed():
    calls: list[tuple[str, ...]] = []
    collector = ModemCollector(runner=_modem_off_until_setup(calls), signal_setup_s=10)
    first = collector.collect()
    assert ("mmcli", "-m", "0", "--signal-setup=10") in calls
    assert first["wwan0"]["rsrp_dbm"] == pytest.approx(-97.0) and "rsrq_db" in first["wwan0"]
    calls.clear()
    assert collector.collect() == first and ("mmcli", "-m", "0", "--signal-setup=10") not in calls

    calls.clear()
    read_only = ModemCollector(runner=_modem_off_until_setup(calls), signal_setup_s=0).collect()
    assert not any("--signal-setup" in " ".join(c) for c in calls) and "rsrp_dbm" not in read_only["wwan0"]

    calls.clear()
    refused = ModemCollector(runner=_modem_off_until_setup(calls, setup_works=False), signal_setup_s=10)
    refused.collect()
    refused.collect()
    assert sum("--signal-setup=10" in c for c in calls) == 1  # a refused setup is not retried every step
