#!/usr/bin/env bash
# Fairness between peers: a well-behaved peer (turnstile-loadgen from 127.0.0.3, one connection,
# 200 calls/s with Envoy's 20 ms deadline) alone, then beside a flood from another peer (h2load
# from 127.0.0.1, 32 connections x 256 streams, no deadline, at nice 19 so that it does not
# starve the measured client of its core), the server on core 0 and both
# clients on core 1. Prints one row per run: the well-behaved peer's calls, p50 / p99, errors,
# the server's refusals by reason and the door's budget during the flood (turnstile_door_budget: requests open, steered to GRPC_FAIR_QUEUE_TARGET).
#   [BIN=target/release/turnstile] ./scripts/bench-fairness.sh [SECONDS] [ROUNDS] [BACKEND]
#   BACKEND: memory (default) or memcache; extra server settings through the environment of
#   this script are passed on (e.g. GRPC_ADAPTIVE_CONCURRENCY=false).
#   FLOODS=N (default 1): N flooding peers; the first is h2load from 127.0.0.1, each other a
#   turnstile-loadgen from 127.0.0.1x (8 connections x 64 calls, no rate cap, nice 19).
#   HONEST=N (default 1): N > 1 gives N well-behaved peers instead, one connection each from
#   127.0.1.1, 127.0.1.2, ... at 10 calls/s each (20 ms deadline); the row then shows the
#   worst peer's p99 after the p99 of all.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6} rounds=${2:-3} backend=${3:-memory}
floods=${FLOODS:-1} honest=${HONEST:-1}
bin=${BIN:-target/release/turnstile}
tools=${TOOLS:-target/release}
work=$(mktemp -d)
taskset -c 1 memcached -l 127.0.0.1 -p 21441 -U 0 -t 1 -m 256 -u root & mc=$!
trap 'kill $mc 2>/dev/null || true; rm -rf "$work"' EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
wait_port 21441
"$tools/turnstile-loadgen" --dump-body "$work/req.bin" --descriptors 1 --domain bench
url=http://127.0.0.1:18391/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
run() { # label flood(0|1)
  local label=$1 flood=$2
  env GRPC_HOST=0.0.0.0 GRPC_PORT=18391 HOST=127.0.0.1 PORT=18392 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18393 \
    SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE="$backend" MEMCACHE_HOST_PORT=127.0.0.1:21441 \
    taskset -c 0 "$bin" --config-dir scripts/bench-rules 2>/dev/null &
  local server=$! hog=
  wait_port 18391
  if [ "$flood" = 1 ]; then
    nice -n 19 taskset -c 1 h2load -D $((secs + 2)) -c 32 -m 256 -t 1 --data="$work/req.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' "$url" >/dev/null 2>&1 &
    hog=$!
    for f in $(seq 2 "$floods"); do
      nice -n 19 taskset -c 1 "$tools/turnstile-loadgen" --addr 127.0.0.1:18391 --bind "127.0.0.1$f" \
        --connections 8 --concurrency 64 --rate 0 --duration $((secs + 2)) --keys 1000 >/dev/null &
      hog="$hog $!"
    done
    sleep 1 # pacing: the flood is under way before the measured peer starts
  fi
  local out metrics
  if [ "$honest" -gt 1 ]; then
    out=$(taskset -c 1 "$tools/turnstile-loadgen" --addr 127.0.0.1:18391 --bind 127.0.1.1 --peers \
      --connections "$honest" --concurrency "$honest" --rate $((honest * 10)) --duration "$secs" \
      --timeout-ms 20 --keys 1000)
  else
    out=$(taskset -c 1 "$tools/turnstile-loadgen" --addr 127.0.0.1:18391 --bind 127.0.0.3 --connections 1 \
      --concurrency 8 --rate 200 --duration "$secs" --timeout-ms 20 --keys 1000)
  fi
  metrics=$(curl -s http://127.0.0.1:18393/metrics)
  [ -n "$hog" ] && { kill $hog 2>/dev/null || true; wait $hog 2>/dev/null || true; }
  kill -INT "$server"; kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true
  echo "$out" | tr -d '{}"' | tr ',' '\n' | awk -F: -v label="$label" -v m="$metrics" '
    { v[$1] = $2 }
    END {
      n = split(m, lines, "\n")
      for (i = 1; i <= n; i++) if (lines[i] ~ /^turnstile_requests_shed_total/) {
        match(lines[i], /reason="[^"]*"/); r = substr(lines[i], RSTART + 8, RLENGTH - 9)
        split(lines[i], kv, " "); if (kv[2] > 0) shed = shed r "=" kv[2] " "
      }
      for (i = 1; i <= n; i++) if (lines[i] ~ /^turnstile_door_budget/) { split(lines[i], kv, " "); door = kv[2] }
      worst = (v["worst_p99_us"] == "" ? "" : sprintf(" (worst worker %.1f)", v["worst_p99_us"] / 1000))
      printf "| %s | %d | %.1f / %.1f ms%s | %d | %s | %s |\n", label, v["ok"] + v["over_limit"],
        v["p50_us"] / 1000, v["p99_us"] / 1000, worst, v["errors"], (shed == "" ? "none" : shed),
        (door == "" ? "-" : door)
    }'
}
echo "| case ($backend, $floods flooding, $honest well-behaved) | well-behaved calls answered | its p50 / p99 | its errors | server refusals | door budget |"
echo "|---|---|---|---|---|---|"
for round in $(seq "$rounds"); do
  run "alone (round $round)" 0
  run "beside the flood (round $round)" 1
done
