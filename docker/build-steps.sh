#!/usr/bin/env bash
# The EdgePath image's build steps, shared by the Dockerfile and CI.
#
#   docker/build-steps.sh build PREFIX    install the service into PREFIX/venv (pins from requirements.txt),
#                                         generating the protobuf/gRPC code from proto/ first
#   docker/build-steps.sh verify PREFIX   check the installed tree: CLI runs, generated code imports,
#                                         the health check script is in place
#
# Run from the build context root (the Dockerfile's WORKDIR, or a copy of the repository). The Dockerfile
# runs `build` in its builder stage and `verify` right after; tests/deploy/test_deploy_image.py runs both outside
# Docker into a temporary PREFIX, so the steps are proven on machines without a Docker engine.
# Only PREFIX, the context's generated wire/ folders and service/native/target are written. Needs python3.11 (or
# $PYTHON), pip access to the package index, a C/C++ compiler (contextualbandits has no wheel) with OpenMP
# (libgomp), and for the compiled engines a Rust toolchain (cargo) with access to the crate registry.
set -euo pipefail

usage() { echo "usage: $0 build|verify PREFIX" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
prefix=$2
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The Dockerfile sets BUILD_NO_CACHE=1 (no pip cache in the image layer); CI reuses the machine's pip cache.
[ "${BUILD_NO_CACHE:-0}" = 1 ] && export PIP_NO_CACHE_DIR=1
# contextualbandits is built from source (C/Cython, OpenMP) and adds -march=native unless told not to:
# a portable image must not depend on the build machine's CPU.
export DONT_SET_MARCH=1

build() {
  [ -f requirements.txt ] && [ -f proto/generate.py ] && [ -d service ] || {
    echo "build-steps: run from the build context root (requirements.txt, proto/, service/)" >&2; exit 2; }
  mkdir -p "$prefix"
  # requirements.txt pins everything (service, agent, tests, tools); used as pip constraints so that only the
  # service's own dependencies are installed, at those versions. Constraints cannot carry extras: strip them.
  local constraints
  constraints=$(mktemp)
  sed -E 's/\[[^]]*\]//' requirements.txt > "$constraints"
  # 1. Code generation in a throw-away venv (grpcio-tools is a build-time tool only), pinned by requirements.txt.
  local gen
  gen=$(mktemp -d)
  "$PYTHON" -m venv "$gen/venv"
  "$gen/venv/bin/pip" install -q -c "$constraints" grpcio-tools
  "$gen/venv/bin/python" proto/generate.py
  rm -rf "$gen"
  # 2. Runtime venv: the service package (with its generated wire/ modules) and only its runtime dependencies,
  #    at the versions pinned in requirements.txt. Bytecode is compiled here, so the
  #    read-only root filesystem of the container never needs to write .pyc files.
  "$PYTHON" -m venv "$prefix/venv"
  #    The image keeps the contextualbandits policies (and v1 artefacts): extra `library-policies`; the lab
  #    (evaluation, datasets, plots: extra `lab`) stays out of the image.
  "$prefix/venv/bin/pip" install -q -c "$constraints" "./service[library-policies]"
  # 3. The compiled decision engines (service/native, Rust + PyO3; issue 16) where a Rust toolchain is on PATH
  #    (the Dockerfile's builder stage has one): a wheel built by maturin in a throw-away venv, installed into the
  #    runtime venv. Without cargo the service decides with its Python engines (the same results);
  #    REQUIRE_NATIVE=1 (the Dockerfile) makes that an error instead.
  if command -v cargo >/dev/null && [ -d service/native ]; then
    local native
    native=$(mktemp -d)
    "$PYTHON" -m venv "$native/venv"
    "$native/venv/bin/pip" install -q -c "$constraints" maturin
    PATH="$native/venv/bin:$PATH" "$native/venv/bin/maturin" build --release --quiet \
      -m service/native/Cargo.toml -i "$prefix/venv/bin/python" -o "$native/wheels"
    "$prefix/venv/bin/pip" install -q --no-deps "$native"/wheels/*.whl
    rm -rf "$native"
  elif [ "${REQUIRE_NATIVE:-0}" = 1 ]; then
    echo "build-steps: REQUIRE_NATIVE=1 but no Rust toolchain (cargo) to build service/native" >&2; exit 1
  else
    echo "build-steps: no Rust toolchain (cargo): the compiled engines are left out; the Python engines decide" >&2
  fi
  "$prefix/venv/bin/python" -m compileall -q "$prefix/venv/lib" >/dev/null || true
  rm -f "$constraints"
  install -m 0755 docker/healthcheck.py "$prefix/healthcheck.py"
  # Shipped model artefacts (warm start: EDGEPATH_MODEL_PATH=$prefix/models/<name>). Unsigned (no model.hmac):
  # profile prod refuses them until signed with the deployment's HMAC key (edgepath sign-model; the chart's
  # settings.modelPath).
  if [ -d models ]; then
    rm -rf "$prefix/models"
    cp -r models "$prefix/models"
  fi
  echo "build-steps: installed EdgePath into $prefix/venv"
}

verify() {
  "$prefix/venv/bin/edgepath" --help >/dev/null
  "$prefix/venv/bin/edgepath" serve --help >/dev/null
  "$prefix/venv/bin/python" - <<'PY'
import edgepath.wire.edgepath_pb2_grpc as g  # generated in the build
import grpc_health.v1.health_pb2  # health service for probes and HEALTHCHECK
import contextualbandits.online  # compiled extension (OpenMP: needs libgomp1 at run time)
assert hasattr(g, "PathServiceStub")
import os
from edgepath.adapters.registry import COMPILED
if os.environ.get("REQUIRE_NATIVE") == "1":
    missing = [name for name, installed in COMPILED.items() if not installed]
    assert not missing, f"REQUIRE_NATIVE=1 but the compiled engines {missing} are not installed (edgepath_native)"
    from edgepath.grpc.convert import COMPILED_WIRE
    missing = [part for part, installed in COMPILED_WIRE.items() if not installed]
    assert not missing, f"REQUIRE_NATIVE=1 but the compiled gRPC {missing} are not installed or not of this proto"
# Every runtime module of the package imports: a runtime dependency missing from service/pyproject.toml fails
# the build. The lab (edgepath.evaluation, edgepath.datasets: extra `lab`) is not installed in the image.
import importlib, pkgutil, edgepath
LAB = ("edgepath.evaluation", "edgepath.datasets")
for mod in pkgutil.walk_packages(edgepath.__path__, "edgepath.", onerror=lambda name: None):
    if not mod.name.startswith(LAB):
        importlib.import_module(mod.name)
PY
  [ -x "$prefix/healthcheck.py" ] || { echo "build-steps: $prefix/healthcheck.py missing" >&2; exit 1; }
  for card in "$prefix"/models/*/card.json; do
    [ -e "$card" ] || continue
    ( cd "$(dirname "$card")" && sha256sum --quiet -c SHA256SUMS ) || {
      echo "build-steps: $(dirname "$card") does not match its SHA256SUMS" >&2; exit 1; }
  done
  # Tooling must not leak into the runtime image.
  if "$prefix/venv/bin/python" -c "import grpc_tools" 2>/dev/null; then
    echo "build-steps: grpcio-tools is installed in the runtime venv" >&2; exit 1
  fi
  echo "build-steps: $prefix verified"
}

case "$cmd" in
  build) build ;;
  verify) verify ;;
  *) usage ;;
esac
