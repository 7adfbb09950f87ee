"""EdgePath demo: start the service, replay real paired radio situations through it, summarise, stop.

Run by ``make demo`` (after setup). Everything it writes goes to ``out/demo/``.
Steps:
1. ``edgepath serve`` on free loopback ports (in-process state store, online trainer);
2. ``edgepath-agent replay`` over gRPC: several thousand paired WiFi × 4G situations built
   from the vendored mobilebandwidth data (same city, same ISP where possible), each
   outcome being the chosen path's real measured downlink;
3. a summary table (policy vs wifi_first / lte_first / random / oracle), then the service
   is stopped with SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from edgepath.launch import ServeError, serve_command, start_serve, stop_serve

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
DATA = ROOT / "service" / "data" / "mobilebandwidth"
OUT = ROOT / "out" / "demo"
ROUNDS = int(os.environ.get("EDGEPATH_DEMO_ROUNDS", "5000"))
SEED = int(os.environ.get("EDGEPATH_DEMO_SEED", "7"))
# Warm start (issues 8, 15): serve from the shipped offline-trained model of the default policy (ridge_squarecb);
# `--model PATH` (e.g. models/primary-path-v1, the paper's ActiveExplorer), or `--model none` (cold start).
MODEL = ROOT / "models" / "primary-path-v2"


def _reward_text(policy: str, model: Path | None) -> str:
    """What the served policy optimises: the model card's reward, else the registry's default for the policy."""
    if model is not None and (model / "card.json").is_file():
        card = json.loads((model / "card.json").read_text())
        if card.get("reward_definition"):
            return str(card["reward_definition"])
    from edgepath.engines.primary_path import BanditConfig, policy_spec

    if policy_spec(policy).reward == "utility":
        return BanditConfig().utility.describe()
    return "the paper's Bernoulli reward 1[throughput >= 25 Mbit/s]"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    ready, log_path = OUT / "service.ready.json", OUT / "service.log"
    report, plot = OUT / "replay.json", OUT / "replay.png"
    parser = argparse.ArgumentParser(description="EdgePath demo")
    parser.add_argument("--model", default=str(MODEL), help="model artefact to start from, or 'none' (cold start)")
    model = None if parser.parse_args().model == "none" else Path(parser.parse_args().model)
    extra = ["--model", str(model)] if model is not None else []
    print("$", " ".join(serve_command(ready, *extra)[1:]).replace(str(ROOT) + "/", ""), flush=True)
    try:
        proc, ports = start_serve(ready, log_path, *extra, timeout_s=60)
    except ServeError as exc:
        sys.exit(str(exc))
    try:
        url = f"grpc://127.0.0.1:{ports['grpc_port']}"
        print(f"service up: gRPC {url}, REST http://127.0.0.1:{ports['http_port']} (docs at /docs)", flush=True)
        cmd = [
            str(BIN / "edgepath-agent"),
            "replay",
            "--wifi",
            str(DATA / "wifi4.csv"),
            "--cellular",
            str(DATA / "4G.csv"),
            "--service",
            url,
            "--rounds",
            str(ROUNDS),
            "--seed",
            str(SEED),
            "--report",
            str(report),
            "--plot",
            str(plot),
        ]
        print("$", " ".join(c.replace(str(ROOT) + "/", "") for c in cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)
    finally:
        stop_serve(proc)
    r = json.loads(report.read_text())
    means = r["mean_throughput_mbps"]
    oracle = means["oracle"]
    print()
    print(f"EdgePath demo — {r['rounds']} paired real situations (wifi4 × 4G, seed {r['seed']}), policy {r['policy']}")
    print(f"{'primary-path choice':<28}{'mean Mbit/s':>12}{'vs wifi_first':>15}{'% of oracle':>13}")
    for name in ("policy", "wifi_first", "lte_first", "random", "oracle"):
        v = means[name]
        label = f"{name} ({r['policy']})" if name == "policy" else name
        print(f"{label:<28}{v:>12.2f}{100 * (v / means['wifi_first'] - 1):>14.1f}%{100 * v / oracle:>12.1f}%")
    print(f"policy {r['policy']} maximises: {_reward_text(r['policy'], model)}")
    ci = r["policy_throughput_ci95_mbps"]
    print(
        f"policy 95% CI: [{ci['ci95_low']:.2f}, {ci['ci95_high']:.2f}] Mbit/s; mean Bernoulli reward (acks) "
        f"{r['mean_reward']:.3f}; "
        f"model refits: {r['final_model_version'] - 1}"
    )
    print("Situations are paired from two single-arm measurements (same city/ISP), not simultaneous: see 'pairing'.")
    if model is not None:
        shown = model.relative_to(ROOT) if model.is_relative_to(ROOT) else model
        print(
            f"Started from {shown} (trained on 75% of these users, so this replay includes seen users); "
            "unseen-user scores: its card.md and `edgepath eval primary`."
        )
    print(f"report: {report.relative_to(ROOT)}\nplot:   {plot.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
