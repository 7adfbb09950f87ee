"""Replay unseen users' paired situations over gRPC through a served model, for several pairings (prints figures).

Writes the held-out users' rows of the vendored CSVs (the same SHA-256 user split as ``edgepath
train-offline`` / ``eval primary``: salt ``edgepath-split-v1``, 25%) to ``out/unseen/``, then for each
pairing seed starts ``edgepath serve [--model M]`` on free loopback ports, runs ``edgepath-agent replay``
over gRPC and stops the service (a fresh service per pairing: every replay starts from the artefact).

    .venv/bin/python scripts/replay_unseen.py --model models/primary-path-v2 --seeds 7,8,9 --rounds 2000
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from edgepath.datasets.mobilebandwidth import read_measurements, split_by_user
from edgepath.launch import start_serve, stop_serve

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "service" / "data" / "mobilebandwidth"
OUT = ROOT / "out" / "unseen"


def held_out(src: Path, dst: Path, kind: str) -> int:
    """Copy the CSV rows of the held-out users of ``src`` to ``dst``; returns the number of rows."""
    _, test = split_by_user(read_measurements(src, kind), 0.25, "edgepath-split-v1")
    users = {m.user_uid for m in test}
    with src.open(newline="") as fh, dst.open("w", newline="") as out:
        reader = csv.DictReader(fh)
        writer = csv.DictWriter(out, fieldnames=reader.fieldnames or [])
        writer.writeheader()
        n = 0
        for row in reader:
            if row.get("user_uid") in users:
                writer.writerow(row)
                n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/primary-path-v2", help="artefact, or 'none' for a cold start")
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--rounds", type=int, default=2000)
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    wifi, cell = OUT / "wifi4-unseen.csv", OUT / "4G-unseen.csv"
    n_wifi, n_cell = held_out(DATA / "wifi4.csv", wifi, "wifi"), held_out(DATA / "4G.csv", cell, "cellular")
    print(f"held-out rows: {n_wifi} WiFi, {n_cell} 4G")
    extra = [] if args.model == "none" else ["--model", str(ROOT / args.model)]
    gains, pcts = [], []
    for seed in [int(s) for s in args.seeds.split(",")]:
        ready, log = OUT / f"serve-{seed}.ready.json", OUT / f"serve-{seed}.log"
        proc, ports = start_serve(ready, log, *extra, timeout_s=60)
        report = OUT / f"replay-{seed}.json"
        try:
            cmd = [
                str(ROOT / ".venv" / "bin" / "edgepath-agent"),
                "replay",
                "--wifi",
                str(wifi),
                "--cellular",
                str(cell),
            ]
            cmd += ["--service", f"grpc://127.0.0.1:{ports['grpc_port']}", "--rounds", str(args.rounds)]
            cmd += [
                "--seed",
                str(seed),
                "--report",
                str(report),
                "--plot",
                str(OUT / f"replay-{seed}.png"),
                "--no-progress",
            ]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        finally:
            stop_serve(proc)
        r = json.loads(report.read_text())
        m = r["mean_throughput_mbps"]
        gain, pct = 100 * (m["policy"] / m["wifi_first"] - 1), 100 * m["policy"] / m["oracle"]
        gains.append(gain)
        pcts.append(pct)
        print(
            f"seed {seed}: {r['rounds']} rounds, policy {r['policy']}: {m['policy']:.1f} Mbit/s, wifi_first "
            f"{m['wifi_first']:.1f}, oracle {m['oracle']:.1f}: {gain:+.1f}% vs wifi_first, {pct:.1f}% of oracle"
        )
    print(f"mean over {len(gains)} pairings: {np.mean(gains):+.1f}% vs wifi_first, {np.mean(pcts):.1f}% of oracle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
