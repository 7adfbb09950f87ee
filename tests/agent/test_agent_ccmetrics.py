"""TCP_INFO / MPTCP_INFO decoding and Łuczak et al.'s metrics (edgepath_agent.ccmetrics), issue 20.

Decoding is checked against structs packed at the offsets of include/uapi/linux/tcp.h and
mptcp.h; the metrics against hand-computed series; and one real transfer over the loopback
(a TransferServer with a chosen congestion control) checks the kernel path end to end.
"""

from __future__ import annotations

import struct

import pytest
from edgepath_agent import ccmetrics
from edgepath_agent.ccmetrics import CounterSample, decode_mptcp_info, decode_tcp_info, paper_metrics
from edgepath_agent.meter import TransferServer, transfer


def packed_tcp_info(**values: int) -> bytes:
    buf = bytearray(ccmetrics.TCP_INFO_SIZE)
    for name, v in values.items():
        fmt, off = ccmetrics.TCP_INFO_FIELDS[name]
        struct.pack_into("=" + fmt, buf, off, v)
    return bytes(buf)


def test_tcp_info_fields_land_at_the_uapi_offsets() -> None:
    raw = packed_tcp_info(
        state=1, rtt_us=23_456, rttvar_us=789, snd_cwnd=42, total_retrans=7, bytes_acked=1 << 33,
        data_segs_out=1234, delivery_rate_Bps=987_654, bytes_sent=5_000_000, bytes_retrans=12_345, snd_wnd=65535,
    )  # fmt: skip
    d = decode_tcp_info(raw)
    assert d["state"] == 1 and d["rtt_us"] == 23_456 and d["rttvar_us"] == 789 and d["snd_cwnd"] == 42
    assert d["total_retrans"] == 7 and d["bytes_acked"] == 1 << 33 and d["data_segs_out"] == 1234
    assert d["delivery_rate_Bps"] == 987_654 and d["bytes_sent"] == 5_000_000 and d["bytes_retrans"] == 12_345
    assert d["snd_wnd"] == 65535
    # Offsets 68/72 (rtt, rttvar) and 200/208 (bytes_sent/retrans) are the ones meter.parse_tcp_info reads too.
    assert struct.unpack_from("=I", raw, 68)[0] == 23_456 and struct.unpack_from("=Q", raw, 200)[0] == 5_000_000


def test_short_tcp_info_from_an_older_kernel_omits_the_tail() -> None:
    d = decode_tcp_info(packed_tcp_info(rtt_us=1000, bytes_sent=99)[:104])
    assert d["rtt_us"] == 1000 and "bytes_sent" not in d and "data_segs_out" not in d


def test_mptcp_info_offsets() -> None:
    buf = bytearray(ccmetrics.MPTCP_INFO_SIZE)
    buf[0] = 2
    struct.pack_into("=QQ", buf, 16, 111, 222)  # write_seq, snd_una
    struct.pack_into("=I", buf, 44, 3)  # retransmits
    struct.pack_into("=QQQQ", buf, 48, 10, 2000, 30, 1500)  # bytes_retrans, bytes_sent, bytes_received, bytes_acked
    d = decode_mptcp_info(bytes(buf))
    assert (d["subflows"], d["write_seq"], d["snd_una"], d["retransmits"]) == (2, 111, 222, 3)
    assert (d["bytes_retrans"], d["bytes_sent"], d["bytes_received"], d["bytes_acked"]) == (10, 2000, 30, 1500)


def sample(t: float, sent: int, acked: int, subflows: list[tuple[int, int]], retrans: int = 0, segs: int = 0):
    subs = [{"rtt_us": rtt, "bytes_sent": b, "total_retrans": retrans, "data_segs_out": segs} for rtt, b in subflows]
    return CounterSample(t, {"new_bytes_sent": sent, "bytes_acked": acked}, subs)


def test_protocol_delay_is_littles_law_and_hol_subtracts_the_slowest_path() -> None:
    # 100 kB in flight throughout, 1 MB/s acknowledged: 100 ms protocol delay; slowest sending path 40 ms.
    series = [sample(0.1 * k, 100_000 + 100_000 * k, 100_000 * k, [(20_000, 10 * k + 1), (40_000, 10 * k + 1)])
              for k in range(6)]  # fmt: skip
    m = paper_metrics(series, rate_window=1)
    assert m["protocol_delay_avg_ms"] == pytest.approx(100.0)
    assert m["hol_degree_avg_ms"] == pytest.approx(60.0)
    assert m["path_delay_avg_ms"] == pytest.approx(30.0) and m["path_delay_max_ms"] == pytest.approx(40.0)
    assert m["delay_samples"] == 5


def test_idle_subflow_does_not_count_as_a_path_and_drop_rate_is_eq12() -> None:
    # Subflow 2 (a backup, 200 ms) sends nothing: HoL is measured against the 20 ms path only.
    series = [sample(0.1 * k, 50_000 + 100_000 * k, 100_000 * k, [(20_000, 10 * k + 1), (200_000, 5)], 4, 200)
              for k in range(4)]  # fmt: skip
    m = paper_metrics(series, duration_s=2.0, rate_window=1)
    assert m["hol_degree_avg_ms"] == pytest.approx(50.0 - 20.0)
    assert m["drop_rate_pct"] == pytest.approx(100.0 * 8 / 400)  # Σ retrans / Σ data segments, both subflows
    assert m["drop_rate_seg_s"] == pytest.approx(8 / 2.0)


def test_no_acknowledged_data_gives_no_delay_sample() -> None:
    series = [sample(0.0, 1000, 0, [(10_000, 1)]), sample(0.1, 1000, 0, [(10_000, 1)])]
    m = paper_metrics(series)
    assert m["protocol_delay_avg_ms"] is None and m["hol_degree_avg_ms"] is None and m["delay_samples"] == 0


@pytest.mark.parametrize("algorithm", ["reno", "cubic"])
def test_real_transfer_reports_paper_metrics_and_the_senders_algorithm(algorithm: str) -> None:
    """A real (MPTCP where the kernel has it, else TCP) transfer over the loopback."""
    available = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    if algorithm not in available:
        pytest.skip(f"{algorithm} not loaded in this kernel")
    try:
        server = TransferServer("127.0.0.1", 0, congestion_control=algorithm, sample_interval_s=0.005)
    except PermissionError:
        pytest.skip(f"{algorithm} not allowed for this user (tcp_allowed_congestion_control)")
    with server:
        r = transfer("127.0.0.1", server.port, 4 * 1024 * 1024, timeout_s=20)
    counters = r.server_counters or {}
    assert counters.get("congestion_control") == algorithm
    pm = counters["paper_metrics"]
    assert pm["samples"] >= 2
    assert pm["drop_rate_pct"] is not None and 0.0 <= pm["drop_rate_pct"] <= 100.0
    assert pm["path_delay_avg_ms"] is not None and pm["path_delay_avg_ms"] >= 0.0


def test_testbed_refuses_an_unknown_scenario_with_a_usage_error(tmp_path) -> None:
    from edgepath_agent.testbed.cli import app
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["run", "--report", str(tmp_path / "r.json"), "--scenario", "ssmpx"])
    assert r.exit_code == 2 and "scenario" in r.output
    assert not (tmp_path / "r.json").exists()


def test_cc_verdict_within_ci_of_the_best() -> None:
    from edgepath_agent.testbed.cc import verdict

    per = {"reno": {"mean": 15.0, "ci95": [14.0, 16.0]}, "cubic": {"mean": 15.5, "ci95": [15.2, 15.8]},
           "bbr": {"mean": 11.0, "ci95": [10.0, 12.0]}}  # fmt: skip
    assert verdict(per, "cubic", True) == {"best": "cubic", "advised_within_ci_of_best": True}
    assert verdict(per, "reno", True) == {"best": "cubic", "advised_within_ci_of_best": False}  # 15.0 < 15.2
    assert verdict(per, "bbr", False) == {"best": "bbr", "advised_within_ci_of_best": True}
    assert verdict(per, "vegas", True)["advised_within_ci_of_best"] is None
