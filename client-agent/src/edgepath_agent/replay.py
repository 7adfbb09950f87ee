"""Replay real radio measurements through a running EdgePath service.

Data: CSVs in the format of the "Mobile Access Bandwidth in Practice" release
(SIGCOMM 2022; vendored subset in ``service/data/mobilebandwidth``): one
bandwidth test a row, radio readings as ``;``-separated series taken during the
test, ``2147483647`` or an empty cell for "not available".

Paired situations
-----------------
No public data set measures WiFi and LTE on the same device at the same moment,
so a *situation* pairs two real single-arm measurements:

1. The WiFi rows are shuffled with ``numpy.random.default_rng(seed)``.
2. Each WiFi row (in that order) is paired with one cellular row drawn
   uniformly, with the same generator, from the cellular rows of the **same
   city** (``user_city_id``) **and the same ISP** (``user_isp_id``) when that
   city has any; otherwise from the same city with any ISP. WiFi rows from a
   city without cellular rows are skipped.
3. When ``rounds`` exceeds the number of pairable WiFi rows, the WiFi rows are
   reshuffled and paired again (a new pass).

Each situation becomes one context with two interfaces, ``wlan0`` (WIFI: RSSI,
link speed, frequency) and ``wwan0`` (LTE: RSRP, RSRQ, RSSNR as SINR, RSSI),
mapped by the one reader the service's evaluation also uses
(:mod:`edgepath_agent.mobilebandwidth`: medians of each series, readings outside
the service's documented physical ranges treated as missing). The outcome of a
decision is the real measured downlink bandwidth (``bandwidth_Mbps``) of the
chosen arm's row. The rows carry no RTT or loss, so no latency is reported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from edgepath_agent.client import ServiceClient
from edgepath_agent.mobilebandwidth import UNAVAILABLE, cellular_fields, wifi_fields
from edgepath_agent.mobilebandwidth import series_median as series_median  # re-exported (tests, scripts)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

NOT_AVAILABLE = UNAVAILABLE  # the release's "not available" (kept name)

PAIRING_TEXT = (
    "Paired situations built from two real single-arm measurements (no public data set measures WiFi and LTE on "
    "the same device at the same moment): each WiFi test, in an order shuffled with numpy default_rng(seed), is "
    "paired with a cellular test drawn uniformly (same generator) from the same user_city_id and the same "
    "user_isp_id when the city has one, else the same city with any ISP; WiFi tests from cities without cellular "
    "tests are skipped; extra rounds reshuffle and pair again. Outcome = the chosen arm's measured bandwidth_Mbps."
)


def wifi_interface(row: pd.Series, name: str = "wlan0") -> dict[str, Any]:
    """WiFi test row → interface context dict (the shared reader,
    :func:`edgepath_agent.mobilebandwidth.wifi_fields`)."""
    return wifi_fields(row, name)


def cellular_interface(row: pd.Series, name: str = "wwan0", access_type: str = "LTE") -> dict[str, Any]:
    """Cellular test row → interface context dict (the shared reader,
    :func:`edgepath_agent.mobilebandwidth.cellular_fields`)."""
    return cellular_fields(row, name, access_type)


@dataclass(frozen=True)
class Situation:
    """One paired situation: the context both arms share and each arm's real outcome."""

    wifi_row: int
    cellular_row: int
    user: str
    city: str
    same_isp: bool
    interfaces: tuple[dict[str, Any], ...]
    wifi_mbps: float
    cellular_mbps: float


def load_tests(path: str | Path) -> pd.DataFrame:
    """Read a mobilebandwidth CSV (all columns as text except bandwidth), dropping rows without a bandwidth."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df["bandwidth_Mbps"] = pd.to_numeric(df["bandwidth_Mbps"], errors="coerce")
    return df[df["bandwidth_Mbps"].notna() & (df["bandwidth_Mbps"] >= 0)].reset_index(drop=True)


def pair_situations(
    wifi: pd.DataFrame, cellular: pd.DataFrame, rounds: int, seed: int, cellular_access_type: str = "LTE"
) -> list[Situation]:
    """Build ``rounds`` paired situations (see the module docstring for the rule).

    Raises
    ------
    ValueError
        When no WiFi test shares a city with a cellular test, or rounds < 1.
    """
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    rng = np.random.default_rng(seed)
    by_city: dict[str, np.ndarray] = {c: g.index.to_numpy() for c, g in cellular.groupby("user_city_id")}
    by_city_isp: dict[tuple[str, str], np.ndarray] = {
        k: g.index.to_numpy() for k, g in cellular.groupby(["user_city_id", "user_isp_id"])
    }
    eligible = wifi.index[wifi["user_city_id"].isin(by_city.keys())].to_numpy()
    if eligible.size == 0:
        raise ValueError("no WiFi test shares a user_city_id with a cellular test")
    out: list[Situation] = []
    while len(out) < rounds:
        for w in rng.permutation(eligible):
            if len(out) == rounds:
                break
            wrow = wifi.loc[w]
            city, isp = wrow["user_city_id"], wrow.get("user_isp_id", "")
            pool = by_city_isp.get((city, isp)) if isp else None
            same_isp = pool is not None
            if pool is None:
                pool = by_city[city]
            c = int(pool[rng.integers(pool.size)])
            crow = cellular.loc[c]
            out.append(
                Situation(
                    wifi_row=int(w),
                    cellular_row=c,
                    user=str(wrow.get("user_uid", "") or f"row{int(w)}"),
                    city=str(city),
                    same_isp=same_isp,
                    interfaces=(wifi_interface(wrow), cellular_interface(crow, access_type=cellular_access_type)),
                    wifi_mbps=float(wrow["bandwidth_Mbps"]),
                    cellular_mbps=float(crow["bandwidth_Mbps"]),
                )
            )
    return out


@dataclass
class ReplayResult:
    """Per-round record of a replay; baselines are computed over the same situations."""

    policy: str = ""
    chosen_mbps: list[float] = field(default_factory=list)
    chosen_wifi: list[bool] = field(default_factory=list)
    rewards: list[int] = field(default_factory=list)
    propensities: list[float] = field(default_factory=list)
    model_versions: list[int] = field(default_factory=list)
    situations: list[Situation] = field(default_factory=list)


def run_replay(
    client: ServiceClient,
    situations: Iterable[Situation],
    device_prefix: str = "replay",
    on_round: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Send each situation's context to the service and report the chosen arm's real bandwidth.

    Each situation is sent as the device that measured it: ``device_id`` is
    ``<device_prefix>-<first 16 hex digits of the WiFi test's user_uid>``, so the
    service sees many devices (as in the data) rather than one device asking
    hundreds of times a second.

    Raises
    ------
    edgepath_agent.client.ServiceError
        When the service refuses a call.
    """
    result = ReplayResult()
    for i, s in enumerate(situations):
        device_id = f"{device_prefix}-{s.user[:16]}"
        rec = client.recommend({"device_id": device_id, "interfaces": list(s.interfaces)})
        primary = rec.primary_path
        is_wifi = primary.access_type == "WIFI"
        mbps = s.wifi_mbps if is_wifi else s.cellular_mbps
        ack = client.report_outcome(
            {"device_id": device_id, "decision_id": rec.decision_id, "throughput_bps": mbps * 1e6}
        )
        result.policy = rec.policy
        result.chosen_mbps.append(mbps)
        result.chosen_wifi.append(is_wifi)
        result.rewards.append(ack.reward)
        result.propensities.append(float(primary.propensity or 0.0))
        result.model_versions.append(rec.model_version)
        result.situations.append(s)
        if on_round is not None:
            on_round(i)
    return result


def _mean_ci(values: ArrayLike) -> dict[str, float]:
    """Mean with a normal-approximation 95% confidence interval (1.96 standard errors)."""
    arr = np.asarray(values, dtype=float)
    mean = float(arr.mean())
    half = float(1.96 * arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
    return {"mean": mean, "ci95_low": mean - half, "ci95_high": mean + half}


def baselines(situations: Sequence[Situation]) -> dict[str, np.ndarray]:
    """Per-round throughput (Mbit/s) of the fixed baselines on the same situations.

    ``random`` is the expected value of a fair coin between the two arms.
    """
    w = np.array([s.wifi_mbps for s in situations])
    c = np.array([s.cellular_mbps for s in situations])
    return {"wifi_first": w, "lte_first": c, "random": (w + c) / 2.0, "oracle": np.maximum(w, c)}


def build_report(result: ReplayResult, *, seed: int, data: dict[str, str], service_url: str) -> dict[str, Any]:
    """The replay's JSON report (keys documented in README: rounds, policy, pairing, mean_reward, ...)."""
    base = baselines(result.situations)
    policy = np.asarray(result.chosen_mbps)
    n = policy.size
    half = n // 2
    means = {"policy": float(policy.mean()), **{k: float(v.mean()) for k, v in base.items()}}
    return {
        "rounds": n,
        "policy": result.policy,
        "service": service_url,
        "seed": seed,
        "data": data,
        "pairing": PAIRING_TEXT,
        "same_isp_fraction": float(np.mean([s.same_isp for s in result.situations])),
        "mean_reward": float(np.mean(result.rewards)),
        "mean_throughput_mbps": means,
        "policy_throughput_ci95_mbps": _mean_ci(policy),
        "second_half_mean_throughput_mbps": {
            "policy": float(policy[half:].mean()),
            **{k: float(v[half:].mean()) for k, v in base.items()},
        },
        "gain_vs_wifi_first_pct": 100.0 * (means["policy"] / means["wifi_first"] - 1.0),
        "pct_of_oracle": 100.0 * means["policy"] / means["oracle"],
        "mean_regret_mbps": means["oracle"] - means["policy"],
        "wifi_chosen_fraction": float(np.mean(result.chosen_wifi)),
        "mean_propensity": float(np.mean(result.propensities)),
        "final_model_version": result.model_versions[-1] if result.model_versions else 0,
        "oracle_prefers_lte_fraction": float(np.mean(base["lte_first"] > base["wifi_first"])),
    }


def plot_running_means(result: ReplayResult, path: str | Path, title: str) -> None:
    """Plot the running mean throughput of the policy against the baselines (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = baselines(result.situations)
    rounds = np.arange(1, len(result.chosen_mbps) + 1)
    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    styles = {
        "oracle": ("#2ca02c", "--"),
        "wifi_first": ("#1f77b4", ":"),
        "lte_first": ("#ff7f0e", ":"),
        "random": ("#7f7f7f", "-."),
    }
    for name, values in base.items():
        color, ls = styles[name]
        ax.plot(rounds, np.cumsum(values) / rounds, color=color, linestyle=ls, linewidth=1.5, label=name)
    ax.plot(
        rounds,
        np.cumsum(result.chosen_mbps) / rounds,
        color="#d62728",
        linewidth=2.2,
        label=f"policy ({result.policy})",
    )
    ax.set_xlabel("round (paired situation)")
    ax.set_ylabel("running mean downlink throughput of the chosen path (Mbit/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    lo = min(float(np.mean(v)) for v in base.values())
    ax.set_ylim(bottom=max(0.0, lo * 0.6))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(report: dict[str, Any], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report, indent=2) + "\n")
