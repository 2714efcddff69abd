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
#   MESH=N (root, iptables): N peers as a mesh's sidecars, one connection each and 2 calls/s
#   (h2load -m 1 --rps 2 to 127.0.0.5, every connection given its own source address by an SNAT
#   rule, scripts/lib/nat-peers.sh), opened at MESH_RATE a second (default 250, rounded up to a
#   multiple of 100), each calling until SECONDS after the last has opened (all N are open
#   then). A call is late past 20 ms (h2load has no deadline: its per-call log is read). The
#   row adds the slowest call and the server's RSS per open connection (the highest RSS while
#   they are open, less the RSS before they connect, over N). Each round begins with the no-op
#   floor (turnstile-floor, the same tonic stack) alone in the server's place: what the client,
#   the NAT rules and the kernel cost on this machine. MESH_LOG=path keeps h2load's per-call
#   log (path.0 alone, path.1 beside the flood: start in us, HTTP status, time in us).
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)" # h2load opens a descriptor per connection (MESH)
secs=${1:-6} rounds=${2:-3} backend=${3:-memory}
floods=${FLOODS:-1} honest=${HONEST:-1} mesh=${MESH:-0} mesh_rate=${MESH_RATE:-250}
bin=${BIN:-target/release/turnstile}
tools=${TOOLS:-target/release}
work=$(mktemp -d)
taskset -c 1 memcached -l 127.0.0.1 -p 21441 -U 0 -t 1 -m 256 -u root & mc=$!
. scripts/lib/nat-peers.sh
trap 'kill $mc 2>/dev/null || true; nat_peers_clear bench-fairness; rm -rf "$work"' EXIT
span=$secs # how long the measured side runs: the flood lasts that and 2 s more
if [ "$mesh" -gt 0 ]; then
  command -v h2load >/dev/null || { echo "MESH needs h2load (nghttp2-client)" >&2; exit 1; }
  nat_peers "$mesh" 18391 bench-fairness 127.0.0.5 || { echo "MESH needs root and iptables" >&2; exit 1; }
  per_step=$(((mesh_rate + 99) / 100)) # connections opened every 10 ms
  ramp=$(((mesh + per_step * 100 - 1) / (per_step * 100)))
  # Each connection makes its calls for SECONDS past the end of the ramp: all N are open then.
  mesh_calls_each=$((2 * (secs + ramp)))
  span=$((ramp + secs + ramp))
fi
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
wait_port 21441
"$tools/turnstile-loadgen" --dump-body "$work/req.bin" --descriptors 1 --domain bench
url=http://127.0.0.1:18391/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
mesh_calls() { # server-pid flood(0|1) -> the fields the row reads, as turnstile-loadgen prints them
  local planned=$((mesh * mesh_calls_each)) base peak now client
  base=$(rss_kb "$1") peak=$base
  rm -f "$work/mesh.log" # h2load appends to it
  taskset -c 1 h2load -c "$mesh" -m 1 --rps 2 -r "$per_step" --rate-period 10ms \
    -n "$planned" -t 1 --data="$work/req.bin" --log-file="$work/mesh.log" \
    -H 'content-type: application/grpc' -H 'te: trailers' "${url/127.0.0.1/127.0.0.5}" >/dev/null 2>&1 &
  client=$!
  while kill -0 "$client" 2>/dev/null; do # RSS sampled every half second while they are open
    now=$(rss_kb "$1"); [ "$now" -gt "$peak" ] && peak=$now; sleep 0.5
  done
  wait "$client" || true
  [ -n "${MESH_LOG:-}" ] && cp "$work/mesh.log" "$MESH_LOG.$2"
  sort -n -k3 "$work/mesh.log" | awk -v planned="$planned" -v grown=$(((peak - base) * 1024)) -v n="$mesh" '
    { d[NR] = $3; if ($2 == 200 && $3 <= 20000) ok++ }
    END {
      printf "{\"ok\":%d,\"p50_us\":%d,\"p99_us\":%d,\"max_us\":%d,\"errors\":%d,\"bytes_per_connection\":%d}\n",
        ok, d[int(NR * 0.5) + 1], d[int(NR * 0.99) + 1], d[NR], planned - ok, grown / n }'
}
run() { # label flood(0|1) [floor]
  local label=$1 flood=$2
  if [ "${3:-}" = floor ]; then
    taskset -c 0 "$tools/turnstile-floor" 0.0.0.0:18391 &
  else
    env GRPC_HOST=0.0.0.0 GRPC_PORT=18391 HOST=127.0.0.1 PORT=18392 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18393 \
      SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE="$backend" MEMCACHE_HOST_PORT=127.0.0.1:21441 \
      taskset -c 0 "$bin" --config-dir scripts/bench-rules 2>/dev/null &
  fi
  local server=$! hog=
  wait_port 18391
  if [ "$flood" = 1 ]; then
    nice -n 19 taskset -c 1 h2load -D $((span + 2)) -c 32 -m 256 -t 1 --data="$work/req.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' "$url" >/dev/null 2>&1 &
    hog=$!
    for f in $(seq 2 "$floods"); do
      nice -n 19 taskset -c 1 "$tools/turnstile-loadgen" --addr 127.0.0.1:18391 --bind "127.0.0.1$f" \
        --connections 8 --concurrency 64 --rate 0 --duration $((span + 2)) --keys 1000 >/dev/null &
      hog="$hog $!"
    done
    sleep 1 # pacing: the flood is under way before the measured peer starts
  fi
  local out metrics
  if [ "$mesh" -gt 0 ]; then
    out=$(mesh_calls "$server" "$flood")
  elif [ "$honest" -gt 1 ]; then
    out=$(taskset -c 1 "$tools/turnstile-loadgen" --addr 127.0.0.1:18391 --bind 127.0.1.1 --peers \
      --connections "$honest" --concurrency "$honest" --rate $((honest * 10)) --duration "$secs" \
      --timeout-ms 20 --keys 1000)
  else
    out=$(taskset -c 1 "$tools/turnstile-loadgen" --addr 127.0.0.1:18391 --bind 127.0.0.3 --connections 1 \
      --concurrency 8 --rate 200 --duration "$secs" --timeout-ms 20 --keys 1000)
  fi
  metrics=$(curl -s http://127.0.0.1:18393/metrics || true) # none from the floor
  [ -n "$hog" ] && { kill $hog 2>/dev/null || true; wait $hog 2>/dev/null || true; }
  # The floor has no handler of its own, and a background job of a script ignores SIGINT.
  if [ "${3:-}" = floor ]; then kill "$server"; else kill -INT "$server"; kill -INT "$server" 2>/dev/null || true; fi
  wait "$server" 2>/dev/null || true
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
      if (v["max_us"] != "") worst = sprintf(" (max %.1f)", v["max_us"] / 1000)
      per = (v["bytes_per_connection"] == "" ? "" : sprintf(" %d |", v["bytes_per_connection"]))
      printf "| %s | %d | %.1f / %.1f ms%s | %d | %s | %s |%s\n", label, v["ok"] + v["over_limit"],
        v["p50_us"] / 1000, v["p99_us"] / 1000, worst, v["errors"], (shed == "" ? "none" : shed),
        (door == "" ? "-" : door), per
    }'
}
if [ "$mesh" -gt 0 ]; then
  echo "| case ($backend, $floods flooding, $mesh peers at 2 calls/s) | calls answered within 20 ms | p50 / p99 | late or failed | server refusals | door budget | RSS per connection, bytes |"
  echo "|---|---|---|---|---|---|---|"
else
  echo "| case ($backend, $floods flooding, $honest well-behaved) | well-behaved calls answered | its p50 / p99 | its errors | server refusals | door budget |"
  echo "|---|---|---|---|---|---|"
fi
for round in $(seq "$rounds"); do
  # The mesh's harness on this machine: the no-op floor (the same tonic stack) in its place.
  [ "$mesh" -gt 0 ] && run "the floor, alone (round $round)" 0 floor
  run "alone (round $round)" 0
  run "beside the flood (round $round)" 1
done
