#!/usr/bin/env bash
# Instructions per proxied request of the agent's router, counted by callgrind (valgrind), which
# counts the same on a busy machine as on a quiet one, unlike the throughput benchmark. The agent
# routes to four `flotilla demo-app` replicas (canary 20 / stable 80, 2 router threads), one
# keep-alive client sends N requests; run twice (2,000 and 12,000 requests) and the difference of
# the totals divided by 10,000 is the cost of one request, start-up excluded.
# Usage: tools/router-instructions.sh [FLOTILLA_BINARY]   (default: target/release/flotilla;
# build it with `cargo build --release`). Needs valgrind, python3 and curl.
set -euo pipefail
BIN=$(realpath "${1:-target/release/flotilla}")
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$DIR"' EXIT
cd "$DIR"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
UP=()
for i in 0 1 2 3; do
  v=1.0; [ "$i" -ge 2 ] && v=2.0
  p=$(port); UP+=("$p")
  "$BIN" demo-app --version "$v" --port "$p" >/dev/null 2>&1 &
done
ROUTER=$(port); CONTROL=$(port)
cat > agent.yaml <<YAML
cluster: bench
router: {listen: "127.0.0.1:$ROUTER", threads: 2}
control: {listen: "127.0.0.1:$CONTROL"}
weights: {canary: 20}
subsets:
  stable: {endpoints: ["127.0.0.1:${UP[0]}", "127.0.0.1:${UP[1]}"]}
  canary: {endpoints: ["127.0.0.1:${UP[2]}", "127.0.0.1:${UP[3]}"]}
YAML
for p in "${UP[@]}"; do
  for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$p/healthz" && break; sleep 0.2; done
done
total() {
  valgrind --tool=callgrind --callgrind-out-file="cg.$1.out" "$BIN" agent --config agent.yaml \
    >/dev/null 2>"cg.$1.log" &
  local vg=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$ROUTER/" && break; sleep 0.5; done
  python3 - "$1" "$ROUTER" <<'PY'
import http.client, sys
n, port = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port)
for _ in range(n):
    c.request("GET", "/pay")
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
PY
  kill -INT "$vg"; wait "$vg" || true
  awk '/^(summary|totals):/ {print $2; exit}' "cg.$1.out"
}
a=$(total 2000)
b=$(total 12000)
echo "$(( (b - a) / 10000 )) instructions per proxied request ($a at 2,000 requests, $b at 12,000)"
