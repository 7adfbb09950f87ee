#!/usr/bin/env python3
"""Headless locust run against EdgePath, writing locust's CSV and HTML reports.

Usage::

    loadtest/run.py                                   # starts a local service on free loopback ports
    loadtest/run.py --users 40 --duration 60s --out out/loadtest
    loadtest/run.py --http http://127.0.0.1:8080 --grpc 127.0.0.1:50051   # an already running service

Writes ``OUT/edgepath_stats.csv``, ``_stats_history.csv``, ``_failures.csv``,
``_exceptions.csv``, ``OUT/report.html`` and the final counts ``OUT/edgepath_final.json``; prints locust's summary. Exit
status is locust's (1 when any request failed). A service started here binds
127.0.0.1 only and is stopped (by its pid) when the run ends.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_VENV_PYTHON = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
if _VENV_PYTHON.exists() and Path(sys.prefix).resolve() != _VENV_PYTHON.parent.parent.resolve():
    os.execv(str(_VENV_PYTHON), [str(_VENV_PYTHON), *sys.argv])  # run inside the project's venv

from edgepath.launch import start_serve, stop_serve  # noqa: E402  (after the re-exec into the venv)

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=20, help="Concurrent simulated devices (half REST, half gRPC)")
    p.add_argument("--spawn-rate", type=float, default=None, help="Users started per second (default: all at once)")
    p.add_argument("--duration", default="30s", help="locust --run-time, e.g. 30s, 2m")
    p.add_argument("--device-decisions-per-s", type=float, default=4.0)
    p.add_argument("--out", type=Path, default=ROOT / "out" / "loadtest")
    p.add_argument("--http", help="Base URL of a running service's REST server")
    p.add_argument("--grpc", help="host:port of a running service's gRPC server")
    p.add_argument("--token", default=os.environ.get("EDGEPATH_TOKEN", ""), help="Bearer token of the devices")
    p.add_argument("--device-id", default="", help="The device the token authenticates (all users use it)")
    p.add_argument("--user-class", action="append", default=[], help="Only these users (RestDevice, GrpcDevice)")
    args = p.parse_args(argv)
    if bool(args.http) != bool(args.grpc):
        p.error("give both --http and --grpc, or neither (to start a local service)")
    args.out.mkdir(parents=True, exist_ok=True)

    proc = None
    with tempfile.TemporaryDirectory(prefix="edgepath-loadtest-") as tmp:
        if args.http:
            http, grpc_target = args.http, args.grpc
        else:
            proc, ports = start_serve(Path(tmp) / "ready.json", args.out / "service.log", "--log-level", "WARNING")
            http, grpc_target = f"http://127.0.0.1:{ports['http_port']}", f"127.0.0.1:{ports['grpc_port']}"
            print(f"loadtest: started service pid {proc.pid}: {http}, grpc {grpc_target}", flush=True)
        cmd = [
            str(VENV_BIN / "locust"),
            "-f",
            str(ROOT / "loadtest" / "locustfile.py"),
            "--headless",
            "--users",
            str(args.users),
            "--spawn-rate",
            str(args.spawn_rate or args.users),
            "--run-time",
            args.duration,
            "--stop-timeout",
            "5",
            "--host",
            http,
            "--grpc-target",
            grpc_target,
            "--device-decisions-per-s",
            str(args.device_decisions_per_s),
            "--csv",
            str(args.out / "edgepath"),
            "--html",
            str(args.out / "report.html"),
            "--final-stats-file",
            str(args.out / "edgepath_final.json"),
            "--only-summary",
            "--loglevel",
            "WARNING",
            *args.user_class,
        ]
        env = {**os.environ, "EDGEPATH_TOKEN": args.token, "EDGEPATH_DEVICE_ID": args.device_id}
        try:
            rc = subprocess.call(cmd, env=env, cwd=ROOT)
        finally:
            if proc is not None:
                stop_serve(proc)
    print(f"loadtest: reports in {args.out} (exit {rc})")
    return rc


if __name__ == "__main__":
    sys.exit(main())
