#!/usr/bin/env bash
# Regenerates go.mod/go.sum of the wrapper module (and of kwok/) from versions.env (a
# maintainer's tool: the committed go.mod/go.sum are what build.sh uses). Reads the
# staging-module list from the exact k8s.io/kubernetes version's own go.mod (served by the
# module proxy) and replaces each `k8s.io/<staging> v0.0.0` by its published
# v0.<minor>.<patch> release.
set -euo pipefail
cd "$(dirname "$0")"
. ./versions.env
export GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
export GOMODCACHE="${GOMODCACHE:-${FLOTILLA_K8S_CACHE:-$HOME/.cache/flotilla-k8s}/go-mod}"
STG="v0.${K8S_VERSION#v1.}"
rm -f go.mod go.sum
go mod init flotilla.invalid/tools/k8s-testenv >/dev/null 2>&1
go mod edit -go=1.26.1  # Argo Rollouts v1.10.1 needs 1.26.1; any Go 1.26 from .1 on builds it
MODFILE=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$MODFILE"); do
  go mod edit -replace="$m=$m@$STG"
done
# Argo Rollouts' own non-k8s replaces (replace directives apply only in the main module).
ARGOMOD=$(go mod download -json "github.com/argoproj/argo-rollouts@$ARGO_ROLLOUTS_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
sed -n 's#^[[:space:]]*\(github\.com/[^ ]*\) => \([^ ]*\) \(v[^ ]*\)$#\1=\2@\3#p' "$ARGOMOD" | while read -r r; do
  go mod edit -replace="$r"
done
# Keep upstream's GODEBUG defaults (they only apply in the main module).
grep '^godebug' "$MODFILE" >> go.mod || true
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
  "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
  "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" \
  "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
  "github.com/argoproj/argo-rollouts/cmd/rollouts-controller@$ARGO_ROLLOUTS_VERSION" \
  "github.com/argoproj/argo-rollouts/cmd/kubectl-argo-rollouts@$ARGO_ROLLOUTS_VERSION"
go mod tidy

# kwok has a module of its own (kwok/): v0.7.0 does not compile against k8s.io/apimachinery
# v0.34 (metav1.InitialEventsListBlueprintAnnotationKey is gone), so it keeps its own k8s pins.
# Its go.mod has no replace directives, so nothing else is needed.
cd kwok
rm -f go.mod go.sum
go mod init flotilla.invalid/tools/k8s-testenv/kwok >/dev/null 2>&1
go mod edit -go=1.24.0
go get -tool "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
go mod tidy
