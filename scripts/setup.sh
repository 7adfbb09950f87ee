#!/usr/bin/env bash
# Set up EdgePath on a fresh Debian 12 machine: system packages, .venv with both
# packages (editable), protobuf/gRPC code generated from proto/. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: iproute2 (ip, ss, tc) for the agent and testbed, redis-server for the Redis store tests.
APT_PACKAGES=(iproute2 iptables redis-server procps)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${missing[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing system packages ${missing[*]} (run as root to install); continuing" >&2
  fi
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt service/pyproject.toml client-agent/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  .venv/bin/python proto/generate.py
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e service -e client-agent
  echo "$want" > "$stamp"
else
  .venv/bin/python proto/generate.py >/dev/null
fi
echo "setup: .venv ready ($(.venv/bin/python --version))"
