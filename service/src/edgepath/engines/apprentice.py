"""Apprentice mode (issue 18): serve a baseline, let the learner learn, promote it when OPE says it is better.

``edgepath serve --mode apprentice --baseline wifi_first|lte_first|kernel``. Per decision:

* the learner (the serving bandit) decides as usual; its choice ``ã`` is only *recorded*;
* the served arm is the baseline's ``b`` with probability ``1 − ε`` and a uniform draw over the K arms
  with probability ``ε`` (``apprentice_explore``), so the logged propensity is exact:
  ``p(a) = (1 − ε)·1[a = b] + ε/K`` — never below ε/K, so the log stays evaluable;
* every outcome reaches the learner through the ordinary outcome log (its ridge regressions learn from
  any arm's outcome, whoever chose it).

Online estimates (over the last ``window`` joined outcomes of this replica):

* learner: IPS ``(1/n) Σ w_i r_i`` with ``w_i = 1[a_i = ã_i] / p_i`` — unbiased for the learner's own
  (stochastic) policy because ``ã`` is drawn independently of the served arm (Horvitz & Thompson
  1952; Li et al., WSDM 2011 for replay with a recorded target choice). The self-normalised estimate
  (Swaminathan & Joachims, NeurIPS 2015, Eq. 3) is reported too (``learner_snips``) but not used for
  promotion: with few matched exploration rows it ignores the missing mass and once promoted a worse
  learner in a replay;
* baseline: *measured*: the self-normalised estimate with ``w_i = 1[a_i = b_i] / p_i``, i.e. the mean
  utility of the decisions where the baseline's arm was served (the baseline serves ≥ 1 − ε of them);
* 95% percentile-bootstrap interval of the learner's estimate (``n_bootstrap`` resamples, recomputed
  every ``check_every`` outcomes).

Promotion (``apprentice_promote``): once at least ``min_outcomes`` outcomes are in the window, the
learner's estimate rests on an effective sample size (Kish, ``(Σw)²/Σw²``) of at least
``min_effective_samples`` (a percentile bootstrap over a handful of matched rows is not evidence),
and the learner's lower 95% bound exceeds the baseline's estimate by ``margin`` (utility units), the learner
serves (its own choice and exact propensity); demotion when its upper bound falls below the baseline's
estimate minus ``margin``. Each switch is an event (time, estimates) kept in :meth:`status` and logged.

Pure: no I/O; the caller passes the random generator's draws and times.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgepath.types import CELLULAR, AccessType, InterfaceContext

BASELINES: tuple[str, ...] = ("wifi_first", "lte_first", "kernel")


def baseline_arm(baseline: str, arms: Sequence[AccessType], interfaces: Sequence[InterfaceContext]) -> int:
    """Index into ``arms`` of the baseline's choice.

    ``wifi_first``: WiFi if offered (what upstream MPTCP path managers do), else the first arm;
    ``lte_first``: the first cellular arm (LTE/NR), else the first arm; ``kernel``: the access type of
    the first interface the device listed (the agent lists interfaces in the kernel's route order, so
    this is the interface of the default route).

    Raises
    ------
    ValueError
        Unknown baseline.
    """
    if baseline == "wifi_first":
        return arms.index(AccessType.WIFI) if AccessType.WIFI in arms else 0
    if baseline == "lte_first":
        return next((i for i, a in enumerate(arms) if a in CELLULAR), 0)
    if baseline == "kernel":
        first = interfaces[0].access_type
        return arms.index(first) if first in arms else 0
    raise ValueError(f"unknown baseline {baseline!r}; choose one of {', '.join(BASELINES)}")


@dataclass(frozen=True)
class ApprenticeConfig:
    """Settings of apprentice mode (``apprentice_*`` settings); ``margin`` is in utility units ([0, 1])."""

    baseline: str = "wifi_first"
    explore: float = 0.05
    promote: bool = False
    margin: float = 0.0
    min_outcomes: int = 200
    min_effective_samples: float = 100.0
    window: int = 5000
    check_every: int = 50
    n_bootstrap: int = 200
    seed: int = 0


@dataclass(frozen=True)
class Served:
    """What apprentice mode serves for one decision: arm index, its exact propensity, who chose it."""

    arm_index: int
    propensity: float
    baseline_arm_index: int
    by_learner: bool


class Apprentice:
    """Serving rule, online OPE and promotion state of apprentice mode (one per serving process)."""

    def __init__(self, config: ApprenticeConfig) -> None:
        if config.baseline not in BASELINES:
            raise ValueError(f"unknown baseline {config.baseline!r}")
        if not 0.0 < config.explore <= 1.0:
            raise ValueError("apprentice explore share must be in (0, 1]: without exploration the log is not evaluable")
        self.config = config
        self.promoted = False
        # rows: (served arm, propensity, learner's arm, baseline's arm, utility)
        self._rows: collections.deque[tuple[int, float, int, int, float]] = collections.deque(maxlen=config.window)
        self._since_check = 0
        self._rng = np.random.default_rng(config.seed)
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=50)
        self.estimates: dict[str, Any] = {"learner": None, "learner_ci95": None, "baseline": None, "n": 0}

    def serve(
        self, arms: Sequence[AccessType], interfaces: Sequence[InterfaceContext], learner_arm: int, learner_p: float
    ) -> Served:
        """The arm to serve given the learner's choice ``learner_arm`` (drawn with probability ``learner_p``)."""
        b = baseline_arm(self.config.baseline, arms, interfaces)
        k = len(arms)
        if self.promoted:
            return Served(learner_arm, learner_p, b, True)
        if k == 1:
            return Served(0, 1.0, 0, False)
        eps = self.config.explore
        a = int(self._rng.integers(0, k)) if self._rng.random() < eps else b
        p = (1.0 - eps) * (1.0 if a == b else 0.0) + eps / k
        return Served(a, p, b, False)

    def observe(
        self,
        served_arm: int,
        propensity: float,
        learner_arm: int,
        baseline_arm_: int,
        utility: float,
        now_s: float | None = None,
    ) -> None:
        """Record one joined outcome (``utility`` in [0, 1]); every ``check_every`` outcomes re-estimate and
        apply the promotion rule (``now_s``: Unix time stamped on a promotion/demotion event)."""
        self._rows.append((served_arm, propensity, learner_arm, baseline_arm_, utility))
        self._since_check += 1
        if self._since_check >= self.config.check_every:
            self._since_check = 0
            self.reestimate(now_s)

    def reestimate(self, now_s: float | None = None) -> None:
        """Recompute the estimates and apply the promotion/demotion rule (see module docstring)."""
        if not self._rows:
            return
        rows = np.asarray(self._rows, dtype=np.float64)
        a, p, learner, base, r = rows.T
        w_l = (a == learner) / p
        w_b = (a == base) / p
        n = len(r)
        learner_v = float((w_l * r).mean())  # IPS: unbiased (no missing-mass bias at small n, unlike SNIPS)
        baseline_v = _snips(w_b, r) or 0.0  # measured: mean utility where the baseline's arm was served
        idx = self._rng.integers(0, n, size=(self.config.n_bootstrap, n))
        boots = (w_l[idx] * r[idx]).mean(axis=1)
        lo, hi = (float(v) for v in np.quantile(boots, [0.025, 0.975]))
        self.estimates = {
            "learner": learner_v,
            "learner_ci95": [lo, hi],
            "learner_snips": _snips(w_l, r),
            "baseline": baseline_v,
            "n": n,
            "learner_effective_sample_size": float(w_l.sum() ** 2 / max((w_l * w_l).sum(), 1e-300)),
        }
        ess = self.estimates["learner_effective_sample_size"]
        if not self.config.promote or len(r) < self.config.min_outcomes or ess < self.config.min_effective_samples:
            return  # a bootstrap interval over a handful of matched rows is not evidence
        if not self.promoted and lo > baseline_v + self.config.margin:
            self._switch(True, now_s)
        elif self.promoted and hi < baseline_v - self.config.margin:
            self._switch(False, now_s)

    def _switch(self, promoted: bool, now_s: float | None) -> None:
        self.promoted = promoted
        self.events.append(
            {
                "event": "promoted" if promoted else "demoted",
                "at_unix_s": now_s,
                "after_outcomes_in_window": self.estimates["n"],
                **{k: self.estimates[k] for k in ("learner", "learner_ci95", "baseline")},
            }
        )

    def status(self) -> dict[str, Any]:
        """JSON-ready state: settings, who serves, the estimates and the promotion/demotion events."""
        c = self.config
        return {
            "mode": "apprentice",
            "baseline": c.baseline,
            "explore": c.explore,
            "serving": "learner" if self.promoted else "baseline",
            "promotion": {"enabled": c.promote, "margin": c.margin, "min_outcomes": c.min_outcomes},
            "value": "mean utility per decision, IPS over the last window outcomes of this replica",
            "window": c.window,
            "estimates": self.estimates,
            "events": list(self.events),
        }


def _snips(w: np.ndarray, r: np.ndarray) -> float | None:
    s = float(w.sum())
    return float((w * r).sum() / s) if s > 0 else None


def _snips_rows(w: np.ndarray, r: np.ndarray) -> np.ndarray:
    den = w.sum(axis=1)
    return np.where(den > 0, (w * r).sum(axis=1) / np.where(den > 0, den, 1.0), 0.0)
