"""The serving load of a model artefact (``load_artefact(..., classifier=False)``): the evaluation-only better-arm
classifier is left out, and scikit-learn (with SciPy and pandas) is imported only when the bandit needs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from edgepath.datasets.mobilebandwidth import pair_situations, read_measurements, split_by_user
from edgepath.training.artefact import load_artefact

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "service" / "data" / "mobilebandwidth"
V1 = ROOT / "models" / "primary-path-v1"  # the paper's active_explorer: SGD oracles (scikit-learn)
V2 = ROOT / "models" / "primary-path-v2"  # the default ridge learner: numpy only


def _contexts(n: int) -> list:
    wifi, cell = read_measurements(DATA / "wifi4.csv")[:800], read_measurements(DATA / "4G.csv")[:1500]
    (_, tew), (_, tec) = split_by_user(wifi, 0.25), split_by_user(cell, 0.25)
    return [s.interfaces for s in pair_situations(tew, tec, 1)[:n]]


def test_an_sgd_oracle_artefact_still_loads_whole_for_serving() -> None:
    """The paper's policy holds scikit-learn oracles: the serving load keeps them and decides as the full load."""
    full, serving = load_artefact(V1), load_artefact(V1, classifier=False)
    assert full.classifier is not None and serving.classifier is None
    contexts = _contexts(60)
    a = [full.bandit.decide(c) for c in contexts]
    b = [serving.bandit.decide(c) for c in contexts]
    assert [(c.arm_index, c.propensity) for c in a] == [(c.arm_index, c.propensity) for c in b]
    assert len({c.arm_index for c in a}) == 2


_CHILD = """
import json, sys
from pathlib import Path
from edgepath.training.artefact import load_artefact
from edgepath.types import InterfaceContext
serving = load_artefact(Path(sys.argv[1]), classifier=False)
loaded = [m for m in ("sklearn", "scipy", "pandas") if m in sys.modules]
contexts = [[InterfaceContext.model_validate(i) for i in c] for c in json.loads(sys.stdin.read())]
choices = [serving.bandit.decide(c) for c in contexts]
print(json.dumps({"loaded": loaded, "classifier": serving.classifier is None,
                  "choices": [[c.arm_index, c.propensity] for c in choices]}))
"""


def test_a_ridge_artefact_serves_without_importing_scikit_learn() -> None:
    """The shipped default model loads for serving in a process that never imports scikit-learn, SciPy or pandas
    (~1.4 s and ~110 MB of a serving process), and decides exactly as the full load does."""
    contexts = _contexts(60)
    sent = json.dumps([[i.model_dump(mode="json", exclude_none=True) for i in c] for c in contexts])
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(V2)], input=sent, capture_output=True, text=True, timeout=120, check=True
    )
    child = json.loads(out.stdout)
    assert child["loaded"] == [] and child["classifier"] is True
    full = load_artefact(V2)
    expected = [[c.arm_index, c.propensity] for c in (full.bandit.decide(c) for c in contexts)]
    assert child["choices"] == expected
    assert len({arm for arm, _ in expected}) == 2
    assert np.all(np.asarray([p for _, p in expected]) > 0)
