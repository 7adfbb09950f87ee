"""Bernoulli reward of a primary-path decision (pure).

Alzadjali et al., §IV-4: the reward is 1 when the observed throughput and
latency meet thresholds, else 0. The paper gives no threshold values; the
defaults live in settings (``reward_throughput_bps`` = 25 Mbit/s, the rate
streaming services ask for UHD video; ``reward_latency_ms`` = 100 ms).
"""

from __future__ import annotations


def bernoulli_reward(
    throughput_bps: float,
    latency_ms: float | None,
    *,
    throughput_threshold_bps: float,
    latency_threshold_ms: float,
) -> int:
    """1 when ``throughput_bps ≥ threshold`` and (``latency_ms ≤ threshold`` or latency unknown).

    Parameters
    ----------
    throughput_bps:
        Measured throughput, bit/s.
    latency_ms:
        Measured latency, ms, or None when the device did not report it (then ignored).

    Returns
    -------
    int
        0 or 1.
    """
    if throughput_bps < throughput_threshold_bps:
        return 0
    if latency_ms is not None and latency_ms > latency_threshold_ms:
        return 0
    return 1
