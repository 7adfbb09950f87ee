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

GO=${GO:-$(command -v go || true)}
[ -z "$GO" ] && [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go
stamp="$TOOLS_BIN/helm.build"
# The stamp records the version and the built-in Kubernetes version of the last build (see below).
if [ -x "$helm_bin" ] && [ -f "$stamp" ] && grep -qx "helm=$HELM_VERSION" "$stamp" \
  && "$helm_bin" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
  echo "$helm_bin"
  exit 0
fi
if [ -z "$GO" ]; then
  echo "install-helm: no Go toolchain (go) found; cannot build helm $HELM_VERSION" >&2
  exit 3
fi
# Without a cluster, `helm template` reports the Kubernetes version compiled into helm. `go install`
# leaves helm's default (v1.20), which charts requiring a newer kubeVersion refuse; helm's Makefile sets
# it from the k8s.io/client-go module version (v0.X.Y -> 1.X): do the same from helm's go.mod.
helm_gomod=$("$GO" mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
client_go=$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$helm_gomod")
k8s_minor=$(echo "$client_go" | sed -n 's/^v0\.\([0-9][0-9]*\)\..*/\1/p')
if [ -z "$k8s_minor" ]; then
  echo "install-helm: cannot read k8s.io/client-go's version from $helm_gomod" >&2
  exit 5
fi
mkdir -p "$TOOLS_BIN"
echo "install-helm: building helm $HELM_VERSION with $("$GO" version) (takes a few minutes)" >&2
# -ldflags set the version string helm prints (as its Makefile does); without it `helm version` reports main.
GOBIN="$TOOLS_BIN" CGO_ENABLED=0 "$GO" install \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
"$helm_bin" version --template '{{.Version}}' | grep -qx "$HELM_VERSION" || {
  echo "install-helm: built $helm_bin but it does not report $HELM_VERSION" >&2
  exit 4
}
printf 'helm=%s\nkubernetes=v1.%s.0\n' "$HELM_VERSION" "$k8s_minor" >"$stamp"
echo "$helm_bin"
