"""Fit MLPM's classifier on the training traces and report on the held-back ones (issue 20).

Usage: ``.venv/bin/python scripts/fit_mlpm.py [--data ../shared/data] [--report out/mlpm-fit.json]``.
Prints the fitted weights (the constants of ``edgepath.engines.mlpm.FITTED``) and the held-back gains
next to the paper's Table II. See ``edgepath.evaluation.mlpm_fit`` for the split and the method.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgepath.evaluation import mlpm_eval, mlpm_fit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=mlpm_eval.shared_data_dir())
    parser.add_argument("--report", type=Path, default=Path("out/mlpm-fit.json"))
    parser.add_argument("--reps", type=int, default=1000)
    args = parser.parse_args()
    if args.data is None:
        parser.error("no ../shared/data found: pass --data")
    rep = mlpm_fit.report(args.data, reps=args.reps)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(rep, indent=2, allow_nan=False) + "\n")
    print(json.dumps(rep["fitted"], indent=1))
    for split in ("test", "train"):
        for profile, entry in rep[split].items():
            for label in ("hand_set", "fitted"):
                g = entry[label]["gains"]
                print(split, profile, label, json.dumps(g))
    print(f"report: {args.report}")


if __name__ == "__main__":
    main()
