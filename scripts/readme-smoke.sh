#!/usr/bin/env bash
# Runs the README's run command exactly as written (read from README.md, so the two cannot
# drift apart), calls the service over gRPC (grpcurl) and HTTP (/healthcheck), and stops it
# with SIGINT twice (the second ends the drain at once). Fails if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

cmd=$(awk '/^Run the service on its embedded default/ {found = 1}
           found && /^    cargo run/ {sub(/^    /, ""); print; exit}' README.md)
[ -n "$cmd" ] || { echo "README.md has no run command after 'Run the service on its embedded default'"; exit 1; }
grpcurl=${GRPCURL:-.venv-peers/bin/grpcurl}
log=$(mktemp)
echo "==> README run command: $cmd"
setsid bash -c "exec $cmd" >"$log" 2>&1 &
pid=$!
stop() { kill -INT "$pid" 2>/dev/null || true; sleep 0.2; kill -INT "$pid" 2>/dev/null || true; }
trap 'stop; kill -9 "$pid" 2>/dev/null || true' EXIT

# The first run builds the release binary: allow for it.
for _ in $(seq 1200); do
  if (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null && \
     python3 -c 'import urllib.request,sys; sys.exit(0 if urllib.request.urlopen("http://127.0.0.1:8080/healthcheck").read() == b"OK" else 1)' 2>/dev/null; then
    break
  fi
  kill -0 "$pid" 2>/dev/null || { echo "the service exited:"; cat "$log"; exit 1; }
  sleep 0.5
done
health=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8080/healthcheck").read().decode())')
[ "$health" = OK ] || { echo "/healthcheck answered '$health'"; cat "$log"; exit 1; }
echo "==> /healthcheck: $health"
answer=$("$grpcurl" -plaintext -d '{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"x"},{"key":"bar","value":"y"}]}]}' \
  localhost:8081 envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit)
echo "$answer" | tr -s ' \n' ' '; echo
echo "$answer" | grep -q '"overallCode": "OK"' || { echo "unexpected answer"; exit 1; }
echo "$answer" | grep -q '"limitRemaining": 2' || { echo "unexpected answer"; exit 1; }
trap - EXIT
kill -INT "$pid"
sleep 0.2
kill -INT "$pid" 2>/dev/null || true
wait "$pid" && code=0 || code=$?
[ "$code" = 0 ] || { echo "the service exited with $code"; cat "$log"; exit 1; }
echo "==> README run command: served, answered and stopped (exit 0)"
