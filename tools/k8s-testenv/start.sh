#!/usr/bin/env bash
# Starts a Kubernetes test environment on loopback and supervises it until stopped:
# one etcd, and N clusters that share it, each with its own kube-apiserver (its own --etcd-prefix
# and port, token auth, --advertise-address=127.0.0.1), kube-controller-manager, kube-scheduler
# and kwok (the fake kubelet: it heartbeats the fake Nodes and marks scheduled Pods Running and
# Ready with a podIP; no container runs). Writes DIR/cluster-<i>/kubeconfig, installs the given
# CRDs in every cluster, prints `k8s-testenv: ready ...` on stdout once every cluster serves,
# has its Nodes Ready, its default ServiceAccount and its CRDs Established, then waits.
#
# Stops everything on SIGTERM/SIGINT/exit; every child also gets SIGKILL if this script dies
# (setpriv --pdeathsig). Exits non-zero as soon as any component exits.
#
# usage: start.sh --dir DIR [--clusters N] [--nodes M] [--crd FILE]... [--bin-dir BINDIR]
#                 [--timeout SECONDS] [--token-webhook KUBECONFIG] [--egress-uds SOCKET]
# --token-webhook: every API server also asks that token webhook (TokenReview v1) about bearer
# tokens it does not know, as EKS's API servers ask their authenticator.
# --egress-uds: every API server reaches the cluster network (its service, pod and node proxies)
# through the HTTP CONNECT proxy on that Unix socket (an EgressSelectorConfiguration), as API
# servers reach their nodes through a konnectivity server.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="" CLUSTERS=1 NODES=2 BIN="" TIMEOUT=180 WEBHOOK="" EGRESS=""
CRDS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --clusters) CLUSTERS="$2"; shift 2 ;;
    --nodes) NODES="$2"; shift 2 ;;
    --crd) CRDS+=("$2"); shift 2 ;;
    --bin-dir) BIN="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --token-webhook) WEBHOOK="$2"; shift 2 ;;
    --egress-uds) EGRESS="$2"; shift 2 ;;
    *) echo "start.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$DIR" ] || { echo "start.sh: --dir is required" >&2; exit 2; }
for c in openssl curl setpriv; do
  command -v "$c" >/dev/null 2>&1 || { echo "start.sh: $c is needed" >&2; exit 2; }
done
if [ -z "$BIN" ]; then BIN=$("$HERE/build.sh" | tail -n1); fi
mkdir -p "$DIR/logs"
DIR="$(cd "$DIR" && pwd)"
T0=$(date +%s%N)

PIDS=() NAMES=()
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# run NAME CMD...: starts a component, its output in DIR/logs/NAME.log, killed with this script.
run() {
  local name="$1"; shift
  setpriv --pdeathsig KILL -- "$@" >"$DIR/logs/$name.log" 2>&1 &
  PIDS+=("$!"); NAMES+=("$name")
}
fail() {
  echo "k8s-testenv: $*" >&2
  local n
  for n in "${NAMES[@]}"; do
    echo "--- last lines of $DIR/logs/$n.log" >&2
    tail -n 15 "$DIR/logs/$n.log" >&2 || true
  done
  exit 1
}
check_alive() {
  local i
  for i in "${!PIDS[@]}"; do
    kill -0 "${PIDS[$i]}" 2>/dev/null || fail "${NAMES[$i]} exited during start-up"
  done
}
deadline=$(( $(date +%s) + TIMEOUT ))
# until_ok WHAT CMD...: polls CMD until it succeeds, failing on timeout or a dead component.
until_ok() {
  local what="$1"; shift
  until "$@" >/dev/null 2>&1; do
    check_alive
    [ "$(date +%s)" -lt "$deadline" ] || fail "timed out after ${TIMEOUT}s waiting for $what"
    sleep 0.2
  done
}
# A free loopback port (nothing accepts a connection on it), distinct from the ones handed out,
# below Linux's ephemeral range (32768-60999) so that no outgoing connection holds it.
USED=" "
free_port() {
  local p
  while :; do
    p=$(( 20000 + RANDOM % 12000 ))
    case "$USED" in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then USED="$USED$p "; echo "$p"; return; fi
  done
}

# Certificates: one CA, a serving certificate for 127.0.0.1/localhost, a service-account key.
PKI="$DIR/pki"
mkdir -p "$PKI"
openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=flotilla-k8s-testenv-ca" \
  -keyout "$PKI/ca.key" -out "$PKI/ca.crt" >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$PKI/serving.key" \
  -out "$PKI/serving.csr" >/dev/null 2>&1
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$PKI/ext.cnf"
openssl x509 -req -in "$PKI/serving.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
  -days 7 -extfile "$PKI/ext.cnf" -out "$PKI/serving.crt" >/dev/null 2>&1
openssl genrsa -out "$PKI/sa.key" 2048 >/dev/null 2>&1
openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" >/dev/null 2>&1
CA_B64=$(base64 -w0 <"$PKI/ca.crt")

ETCD_PORT=$(free_port); ETCD_PEER=$(free_port)
run etcd "$BIN/etcd" --name testenv --data-dir "$DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "testenv=http://127.0.0.1:$ETCD_PEER" --unsafe-no-fsync --log-level warn
until_ok "etcd" curl -sf "http://127.0.0.1:$ETCD_PORT/health"

{
  echo "ETCD_URL=http://127.0.0.1:$ETCD_PORT"
  echo "BIN_DIR=$BIN"
  echo "CLUSTERS=$CLUSTERS"
} >"$DIR/env"

# api I METHOD PATH [curl args...]: a request to cluster I's API server as its admin.
api() {
  local i="$1" method="$2" path="$3"; shift 3
  local c="$DIR/cluster-$i"
  curl -sS -f -A k8s-testenv --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(cat "$c/token")" \
    -X "$method" "https://127.0.0.1:$(cat "$c/port")$path" "$@"
}

for i in $(seq 0 $((CLUSTERS - 1))); do
  c="$DIR/cluster-$i"
  mkdir -p "$c/certs"
  port=$(free_port)
  echo "$port" >"$c/port"
  token=$(openssl rand -hex 24)
  echo "$token" >"$c/token"
  echo "$token,admin,admin-uid,system:masters" >"$c/tokens.csv"
  cat >"$c/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cluster-$i
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $CA_B64
users:
- name: admin
  user:
    token: $token
contexts:
- name: cluster-$i
  context:
    cluster: cluster-$i
    user: admin
    namespace: default
current-context: cluster-$i
EOF
  echo "API_PORT_$i=$port" >>"$DIR/env"
  if [ -n "$EGRESS" ]; then
    printf '%s\n' "apiVersion: apiserver.k8s.io/v1beta1" "kind: EgressSelectorConfiguration" \
      "egressSelections:" "- name: cluster" "  connection:" "    proxyProtocol: HTTPConnect" \
      "    transport:" "      uds:" "        udsName: $EGRESS" >"$c/egress.yaml"
  fi
  run "kube-apiserver-$i" bash "$HERE/restartable.sh" "$c/apiserver" "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" --etcd-prefix "/cluster-$i" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
    --cert-dir "$c/certs" --tls-cert-file "$PKI/serving.crt" --tls-private-key-file "$PKI/serving.key" \
    --token-auth-file "$c/tokens.csv" --authorization-mode RBAC \
    --service-account-issuer "https://127.0.0.1:$port" \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true --profiling=false \
    ${WEBHOOK:+--authentication-token-webhook-config-file "$WEBHOOK" --authentication-token-webhook-version v1} \
    ${EGRESS:+--egress-selector-config-file "$c/egress.yaml"}
done

for i in $(seq 0 $((CLUSTERS - 1))); do
  c="$DIR/cluster-$i"
  until_ok "kube-apiserver-$i /readyz" api "$i" GET /readyz
  # --node-monitor-grace-period: kwok renews its fake Nodes' status about once a minute, past
  # the default grace period; the node lifecycle controller would then mark every Pod NotReady
  # for good (kwok does not mark them Ready again), which a real kubelet never lets happen.
  run "kube-controller-manager-$i" "$BIN/kube-controller-manager" --kubeconfig "$c/kubeconfig" \
    --node-monitor-grace-period=1h \
    --secure-port 0 --leader-elect=false --cluster-name "cluster-$i" \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" --profiling=false
  run "kube-scheduler-$i" "$BIN/kube-scheduler" --kubeconfig "$c/kubeconfig" \
    --secure-port 0 --leader-elect=false --profiling=false
  run "kwok-$i" "$BIN/kwok" --kubeconfig "$c/kubeconfig" --manage-all-nodes=true \
    --cidr "10.$((64 + i)).0.1/16" --node-ip 127.0.0.1
  for n in $(seq 0 $((NODES - 1))); do
    name="fake-node-$n"
    until_ok "node $name in cluster-$i" api "$i" POST /api/v1/nodes -H 'Content-Type: application/json' \
      --data-binary "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$name\",\"annotations\":{\"node.alpha.kubernetes.io/ttl\":\"0\",\"kwok.x-k8s.io/node\":\"fake\"},\"labels\":{\"kubernetes.io/hostname\":\"$name\",\"kubernetes.io/os\":\"linux\",\"kubernetes.io/arch\":\"amd64\",\"type\":\"kwok\"}}}"
  done
  for f in ${CRDS[@]+"${CRDS[@]}"}; do
    out=$(api "$i" POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions \
      -H 'Content-Type: application/yaml' --data-binary "@$f" 2>&1) \
      || fail "installing CRD $f in cluster-$i: $out"
    name=$(printf '%s' "$out" | grep -o '"name":"[^"]*"' | head -n1 | cut -d'"' -f4)
    echo "$name" >>"$c/crds"
  done
done

nodes_ready() {
  local n
  n=$(api "$1" GET /api/v1/nodes | grep -o '"type":"Ready","status":"True"' | wc -l)
  [ "$n" -ge "$NODES" ]
}
for i in $(seq 0 $((CLUSTERS - 1))); do
  c="$DIR/cluster-$i"
  until_ok "default namespace in cluster-$i" api "$i" GET /api/v1/namespaces/default
  until_ok "default ServiceAccount in cluster-$i" api "$i" GET /api/v1/namespaces/default/serviceaccounts/default
  until_ok "$NODES Ready nodes in cluster-$i" nodes_ready "$i"
  if [ -f "$c/crds" ]; then
    while read -r name; do
      until_ok "CRD $name Established in cluster-$i" \
        bash -c "curl -sSf -A k8s-testenv --cacert '$PKI/ca.crt' -H 'Authorization: Bearer $(cat "$c/token")' \
          https://127.0.0.1:$(cat "$c/port")/apis/apiextensions.k8s.io/v1/customresourcedefinitions/$name \
          | grep -q '\"type\":\"Established\",\"status\":\"True\"'"
    done <"$c/crds"
  fi
done

ms=$(( ($(date +%s%N) - T0) / 1000000 ))
echo "k8s-testenv: ready $CLUSTERS cluster(s) in $DIR after ${ms} ms"
# Supervise: the first component to exit ends the environment.
set +e
wait -n "${PIDS[@]}"
rc=$?
for i in "${!PIDS[@]}"; do
  if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
    echo "k8s-testenv: ${NAMES[$i]} exited (status $rc); see $DIR/logs/${NAMES[$i]}.log" >&2
  fi
done
exit 1
