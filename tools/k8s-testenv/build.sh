#!/usr/bin/env bash
# Builds the Kubernetes test environment's upstream binaries from the Go module proxy, once:
# kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes), etcd
# (go.etcd.io/etcd/server/v3), rollouts-controller and kubectl-argo-rollouts (Argo Rollouts) and
# kwok (the fake kubelet), all from this wrapper module's committed go.mod/go.sum (kwok from
# kwok/go.mod), CGO off.
#
# Output: a directory outside the work tree, keyed by versions.env, both go.mod/go.sum, the
# build tags and flags and the Go version: ${FLOTILLA_K8S_CACHE:-$HOME/.cache/flotilla-k8s}/
# bin-<key>/. Built only when missing (a flock serialises concurrent callers); its path is
# printed as the last stdout line. Go's module and build caches live in the same cache root
# (go-mod/, go-build/) unless GOMODCACHE/GOCACHE are set. `--print-dir` prints the directory
# without building; `--module-dir MODULE` prints where the module cache holds a module of this
# graph (downloading it if needed), `--crd-module-dir MODULE` one of crds/go.mod (the CRDs of
# Gateway API and Istio); `--podhash` builds the podhash helper and prints its path.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE"
. ./versions.env
command -v go >/dev/null 2>&1 || { echo "k8s-testenv: the go command is needed (Go >= 1.26.1)" >&2; exit 1; }
CACHE="${FLOTILLA_K8S_CACHE:-$HOME/.cache/flotilla-k8s}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
export GOMODCACHE="${GOMODCACHE:-$CACHE/go-mod}" GOCACHE="${GOCACHE:-$CACHE/go-build}"
TAGS="selinux,notest,grpcnotrace"
# The key: everything the binaries depend on (not this script's other lines).
KEY=$( { grep -v '^#' versions.env; cat go.mod go.sum kwok/go.mod kwok/go.sum; echo "$TAGS $GOFLAGS"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16)
OUT="$CACHE/bin-$KEY"
BINS="kube-apiserver kube-controller-manager kube-scheduler etcd rollouts-controller kubectl-argo-rollouts kwok"
case "${1:-}" in
  --print-dir) echo "$OUT"; exit 0 ;;
  # --module-dir MODULE: the source directory of a module of this graph in the module cache
  # (e.g. Argo Rollouts' CRDs are under github.com/argoproj/argo-rollouts's manifests/crds).
  --module-dir)
    go mod download "$2"
    go list -m -f '{{.Dir}}' "$2"
    exit 0 ;;
  # --crd-module-dir MODULE: the same, for a module of crds/go.mod (Gateway API's and Istio's
  # CRDs, read from their modules at test time; nothing of them is built).
  --crd-module-dir)
    cd crds
    go mod download "$2"
    go list -m -f '{{.Dir}}' "$2"
    exit 0 ;;
  # --podhash: the podhash helper (podhash/main.go: Argo's pod-template hash of the cases Flotilla
  # tests its own against), built from this module's graph when missing; prints its path.
  --podhash)
    mkdir -p "$CACHE"
    PKEY=$( { cat podhash/main.go go.mod go.sum; echo "$GOFLAGS"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16)
    P="$CACHE/podhash-$PKEY"
    if [ ! -x "$P" ]; then
      go build -o "$P.tmp.$$" ./podhash
      mv "$P.tmp.$$" "$P"
    fi
    echo "$P"
    exit 0 ;;
esac

complete() { for b in $BINS; do [ -x "$OUT/$b" ] || return 1; done; }
mkdir -p "$CACHE"
exec 9>"$CACHE/build.lock"
flock 9
if complete; then echo "$OUT"; exit 0; fi

MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
V=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  V="$V -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean"
done
TMP="$CACHE/tmp-$KEY.$$"
rm -rf "$TMP"; mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
start=$(date +%s)
echo "k8s-testenv: building $BINS into $OUT (k8s $K8S_VERSION, etcd $ETCD_VERSION, argo-rollouts $ARGO_ROLLOUTS_VERSION, kwok $KWOK_VERSION)" >&2
# (no `go mod download`: it fetches every module of the graph, and the proxy refuses some unused ones, e.g. k8s.io/kms@v0.34.5; go build fetches what it needs)
# One go invocation: the packages shared by the six programs compile once, links run in parallel.
go build -tags "$TAGS" -ldflags "-s -w $V" -o "$TMP/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  go.etcd.io/etcd/server/v3 \
  github.com/argoproj/argo-rollouts/cmd/rollouts-controller \
  github.com/argoproj/argo-rollouts/cmd/kubectl-argo-rollouts
# kwok from its own module (its k8s pins; see gen-gomod.sh).
(cd kwok && go build -ldflags "-s -w" -o "$TMP/" sigs.k8s.io/kwok/cmd/kwok)
mv "$TMP/server" "$TMP/etcd"
rm -rf "$OUT"
mv "$TMP" "$OUT"
echo "k8s-testenv: built in $(( $(date +%s) - start )) s" >&2
echo "$OUT"
