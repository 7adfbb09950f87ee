"""Rewards of a primary-path decision (pure): the paper's Bernoulli reward and EdgePath's utility.

Alzadjali et al., §IV-4: the reward is 1 when the observed throughput and
latency meet thresholds, else 0. The paper gives no threshold values; the
defaults live in settings (``reward_throughput_bps`` = 25 Mbit/s, the rate
streaming services ask for UHD video; ``reward_latency_ms`` = 100 ms). The
paper's six policies learn from it.

EdgePath's own learners (the default policy) learn from :func:`utility`, a
continuous bounded function of throughput, latency and loss whose mean tracks
the mean delivered throughput (settings ``utility_*``).
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


#: Defaults of :func:`utility` (also the service's defaults, see settings ``utility_*``).
UTILITY_THROUGHPUT_CAP_BPS = 1e9
UTILITY_LATENCY_CAP_MS = 1000.0
UTILITY_LATENCY_WEIGHT = 0.5
UTILITY_LOSS_WEIGHT = 1.0


def utility(
    throughput_bps: float,
    latency_ms: float | None = None,
    loss: float | None = None,
    *,
    throughput_cap_bps: float = UTILITY_THROUGHPUT_CAP_BPS,
    latency_cap_ms: float = UTILITY_LATENCY_CAP_MS,
    latency_weight: float = UTILITY_LATENCY_WEIGHT,
    loss_weight: float = UTILITY_LOSS_WEIGHT,
) -> float:
    """Continuous, bounded utility of a primary-path outcome: what the user feels, in [0, 1].

    ``u = clip(T / T_cap, 0, 1) · (1 − w_L · clip(L / L_cap, 0, 1)) · (1 − w_p · clip(p, 0, 1))``

    with ``T`` the delivered throughput (bit/s), ``L`` the latency (ms) and ``p``
    the loss fraction; an unreported latency or loss leaves its factor at 1.

    Why this form (a design choice of EdgePath, not a paper's equation): with
    latency and loss unreported (or constant) ``u`` is *linear* in throughput
    below the cap, so maximising the mean utility maximises the mean delivered
    throughput — the quantity the evaluation scores every policy on — unlike
    the paper's Bernoulli ``1[T ≥ 25 Mbit/s]``, which is indifferent between
    26 and 600 Mbit/s. The default cap (1 Gbit/s) lies above every vendored
    measurement (max 859 Mbit/s WiFi, 802 Mbit/s 4G), so the clip only bounds
    absurd reports. The latency factor discounts slow paths linearly: at the
    defaults 100 ms costs 5% of the throughput's worth and 1 s halves it; a
    10% loss rate costs 10%. Both factors are in (0, 1] for weights in [0, 1].

    Parameters
    ----------
    throughput_bps:
        Measured delivered throughput, bit/s (negative or non-finite → 0).
    latency_ms:
        Measured latency, ms, or None (then no latency penalty).
    loss:
        Loss fraction in [0, 1], or None (then no loss penalty).

    Returns
    -------
    float
        Utility in [0, 1].

    Raises
    ------
    ValueError
        When ``throughput_cap_bps`` or ``latency_cap_ms`` is not positive, or a weight is outside [0, 1].
    """
    if not throughput_cap_bps > 0.0 or not latency_cap_ms > 0.0:
        raise ValueError("throughput_cap_bps and latency_cap_ms must be > 0")
    if not (0.0 <= latency_weight <= 1.0 and 0.0 <= loss_weight <= 1.0):
        raise ValueError("latency_weight and loss_weight must be in [0, 1]")
    u = _clip01(throughput_bps / throughput_cap_bps)
    if latency_ms is not None:
        u *= 1.0 - latency_weight * _clip01(latency_ms / latency_cap_ms)
    if loss is not None:
        u *= 1.0 - loss_weight * _clip01(loss)
    return u


def _clip01(v: float) -> float:
    if v != v:  # NaN
        return 0.0
    return min(max(v, 0.0), 1.0)
