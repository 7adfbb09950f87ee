#!/usr/bin/env bash
# Build the pinned helm CLI from source with the Go toolchain into .tools/bin (gitignored).
# Idempotent: skips the build when .tools/bin/helm already reports the pinned version.
# Used by tests/deploy (session fixture) and by hand: scripts/install-helm.sh; prints the helm path.
# Exit status 0 with the path on stdout; non-zero (with the reason on stderr) when go is missing or the build fails.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=${HELM_VERSION:-v3.21.4}
TOOLS_BIN=${TOOLS_BIN:-$PWD/.tools/bin}
helm_bin="$TOOLS_BIN/helm"

if [ -x "$helm_bin" ] && "$helm_bin" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
  echo "$helm_bin"
  exit 0
fi
GO=${GO:-$(command -v go || true)}
[ -z "$GO" ] && [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go
if [ -z "$GO" ]; then
  echo "install-helm: no Go toolchain (go) found; cannot build helm $HELM_VERSION" >&2
  exit 3
fi
mkdir -p "$TOOLS_BIN"
echo "install-helm: building helm $HELM_VERSION with $("$GO" version) (takes a few minutes)" >&2
# -ldflags set the version string helm prints (as its Makefile does); without it `helm version` reports main.
GOBIN="$TOOLS_BIN" CGO_ENABLED=0 "$GO" install \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
"$helm_bin" version --template '{{.Version}}' | grep -qx "$HELM_VERSION" || {
  echo "install-helm: built $helm_bin but it does not report $HELM_VERSION" >&2
  exit 4
}
echo "$helm_bin"
