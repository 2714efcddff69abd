#!/usr/bin/env bash
# Overload: the load generator keeps N calls in flight (50 connections, closed loop) against a
# server on core 0, with memcached healthy or behind a relay that holds every answer DELAY ms
# (default 50), load generator and memcached on core 1. Each case runs with the adaptive
# concurrency limit on (GRPC_ADAPTIVE_CONCURRENCY=true) and off (the default), interleaved over ROUNDS rounds. Per run: requests/s
# answered (admitted: OK or OVER_LIMIT), the codes, the client's p50/p99 (queueing in the
# client included) and the server's p99 of admitted calls (ShouldRateLimit histogram bucket),
# and the limit at the end.
#   ./scripts/bench-overload.sh [SECONDS] [ROUNDS] [IN_FLIGHT]   (default 6 s, 3 rounds, 2000)
#   TIMEOUT_MS=20 sends every call with Envoy's default deadline (grpc-timeout).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6} rounds=${2:-3} n=${3:-2000}
bin=${BIN:-target/release/turnstile}
tools=${TOOLS:-target/release}
taskset -c 1 memcached -l 127.0.0.1 -p 21431 -U 0 -t 1 -m 256 -u root & mc=$!
taskset -c 1 "$tools/turnstile-relay" 21432 21431 "${DELAY:-50}" & relay=$!
trap 'kill $mc $relay 2>/dev/null || true' EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
wait_port 21431; wait_port 21432
run() { # label memcached-port env...
  local label=$1 port=$2; shift 2
  env GRPC_HOST=127.0.0.1 GRPC_PORT=18291 HOST=127.0.0.1 PORT=18292 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18293 \
    SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE=memcache MEMCACHE_HOST_PORT="127.0.0.1:$port" "$@" \
    taskset -c 0 "$bin" --config-dir scripts/bench-rules 2>/dev/null &
  local server=$!
  wait_port 18291
  local out metrics
  out=$(taskset -c 1 "$tools/turnstile-loadgen" --addr 127.0.0.1:18291 --connections 50 \
    --concurrency "$n" --duration "$secs" --keys 100000 ${TIMEOUT_MS:+--timeout-ms "$TIMEOUT_MS"})
  metrics=$(curl -s http://127.0.0.1:18293/metrics)
  kill -INT "$server"; wait "$server" 2>/dev/null || true
  echo "$out" | tr -d '{}"' | tr ',' '\n' | awk -F: -v label="$label" -v m="$metrics" '
    { v[$1] = $2 }
    END {
      n = split(m, lines, "\n")
      for (i = 1; i <= n; i++) {
        if (lines[i] ~ /^ratelimit_service_response_time_seconds_bucket/) {
          split(lines[i], kv, " "); match(lines[i], /le="[^"]*"/)
          le[++b] = substr(lines[i], RSTART + 4, RLENGTH - 5); cum[b] = kv[2]
        }
        if (lines[i] ~ /^turnstile_concurrency_limit/) { split(lines[i], kv, " "); limit = kv[2] }
      }
      p99 = "-"; for (i = 1; i <= b; i++) if (cum[i] >= 0.99 * cum[b]) { p99 = le[i] * 1000 " ms"; break }
      other = v["errors"] - v["resource_exhausted"] - v["unavailable"]
      printf "| %s | %.0f | %d | %d | %d | %d | %.1f / %.1f ms | <= %s | %s |\n", label,
        (v["ok"] + v["over_limit"]) / v["seconds"], v["ok"] + v["over_limit"], v["resource_exhausted"],
        v["unavailable"], other, v["p50_us"] / 1000, v["p99_us"] / 1000, p99, limit
    }'
}
echo "| case | admitted/s | admitted | RESOURCE_EXHAUSTED | UNAVAILABLE | other errors | client p50 / p99 | server p99 (admitted) | limit at end |"
echo "|---|---|---|---|---|---|---|---|---|"
for round in $(seq "$rounds"); do
  run "healthy, adaptive (round $round)" 21431 GRPC_ADAPTIVE_CONCURRENCY=true
  run "healthy, off (round $round)" 21431 GRPC_ADAPTIVE_CONCURRENCY=false
done
run "slowed ${DELAY:-50} ms, adaptive" 21432 GRPC_ADAPTIVE_CONCURRENCY=true
run "slowed ${DELAY:-50} ms, off" 21432 GRPC_ADAPTIVE_CONCURRENCY=false
