#!/usr/bin/env bash
# Set up EdgePath on a fresh Debian 12 machine: system packages, .venv with both
# packages (editable), protobuf/gRPC code generated from proto/. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: iproute2 (ip, ss, tc) for the agent and testbed, redis-server for the Redis store tests,
# iperf3 + mptcpize (mptcpd's LD_PRELOAD wrapper, without the daemon) for the agent's iperf3 probe tests.
APT_PACKAGES=(iproute2 iptables redis-server procps iperf3 mptcpize)
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

# NetworkManager for the agent's netns tests (tests/agent/netns/test_agent_networkmanager_netns.py): the
# Debian packages extracted into .tools/networkmanager, never installed system-wide (their maintainer
# scripts would start a daemon that manages this machine's interfaces). Root only; skipped if unavailable.
NM_DEBS=(network-manager libnm0 libndp0 libteamdctl0 libmm-glib0)
if [ "$(id -u)" = 0 ] && [ ! -x .tools/networkmanager/usr/sbin/NetworkManager ] && command -v apt-get >/dev/null; then
  nm_tmp=$(mktemp -d)
  if (cd "$nm_tmp" && apt-get download -qq "${NM_DEBS[@]}" >/dev/null 2>&1); then
    mkdir -p .tools/networkmanager
    for deb in "$nm_tmp"/*.deb; do dpkg -x "$deb" .tools/networkmanager; done
    echo "setup: NetworkManager extracted into .tools/networkmanager (agent tests only)"
  else
    echo "setup: NetworkManager packages not downloadable; the agent's NetworkManager netns tests will skip" >&2
  fi
  rm -rf "$nm_tmp"
fi

# promtool for the chart's alert tests (tests/deploy/test_deploy_monitoring.py): only the CLI, extracted from
# Debian's prometheus package into .tools/bin (the package itself is a 96 MB server with a daemon).
if [ "$(id -u)" = 0 ] && [ ! -x .tools/bin/promtool ] && command -v apt-get >/dev/null; then
  pt_tmp=$(mktemp -d)
  if (cd "$pt_tmp" && apt-get download -qq prometheus >/dev/null 2>&1) \
    && dpkg-deb -x "$(ls "$pt_tmp"/prometheus_*.deb | head -n1)" "$pt_tmp/x"; then
    mkdir -p .tools/bin && cp "$pt_tmp/x/usr/bin/promtool" .tools/bin/promtool
    echo "setup: promtool extracted into .tools/bin (chart alert tests only)"
  else
    echo "setup: prometheus package not downloadable; the promtool tests will skip" >&2
  fi
  rm -rf "$pt_tmp"
fi

# buf for `buf lint` / `buf breaking` on proto/ (tests/test_proto_buf.py): built from its Go module into .tools/bin
# with the Go toolchain (a few minutes, once); without Go the buf tests skip, saying so.
BUF_VERSION=v1.75.0
GO=$(command -v go || true)
[ -z "$GO" ] && [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go
if [ ! -x .tools/bin/buf ] || ! .tools/bin/buf --version 2>/dev/null | grep -qx "${BUF_VERSION#v}"; then
  if [ -n "$GO" ] && GOBIN="$PWD/.tools/bin" "$GO" install "github.com/bufbuild/buf/cmd/buf@$BUF_VERSION" >/dev/null 2>&1; then
    echo "setup: buf $BUF_VERSION built into .tools/bin (proto lint/breaking tests only)"
  else
    echo "setup: could not build buf $BUF_VERSION (no Go toolchain or module download failed); the buf tests will skip" >&2
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

# The compiled decision engines (service/native: Rust + PyO3, the edgepath-native package; issue 16), built into
# .venv where a Rust toolchain is found and rebuilt when their sources change. Without one the Python engines
# decide alone, with the same results, and the native engines' tests skip, saying so.
CARGO=$(command -v cargo || true)
[ -z "$CARGO" ] && [ -x "$HOME/.cargo/bin/cargo" ] && CARGO=$HOME/.cargo/bin/cargo
native_stamp=.venv/.native.sha256
# every Rust source, in any module directory under src/, in a fixed order
native_want=$(cat service/native/Cargo.toml service/native/pyproject.toml service/native/build.rs service/native/*.pyi \
  $(find service/native/src -name '*.rs' | LC_ALL=C sort) proto/edgepath/v1/edgepath.proto | sha256sum | cut -d' ' -f1)
if [ -n "$CARGO" ]; then
  if [ ! -f "$native_stamp" ] || [ "$(cat "$native_stamp")" != "$native_want" ] \
    || ! .venv/bin/python -c "import edgepath_native" 2>/dev/null; then
    PATH="$PWD/.venv/bin:$(dirname "$CARGO"):$PATH" .venv/bin/python -m pip install -q --no-build-isolation ./service/native
    echo "$native_want" > "$native_stamp"
    echo "setup: edgepath-native (the compiled engines) built into .venv"
  fi
else
  echo "setup: no Rust toolchain (cargo): the compiled engines are not built; the Python engines decide alone" >&2
fi
echo "setup: .venv ready ($(.venv/bin/python --version))"
