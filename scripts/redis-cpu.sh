#!/usr/bin/env bash
# Turnstile's and Redis's CPU a call on one redis-server, 1 and 5 descriptors: h2load 4 x 32
# for 10 s; Turnstile pinned to core 0, redis-server and h2load to core 1. Turnstile's CPU from
# /proc/PID/stat, Redis's from INFO cpu, Redis's commands from INFO commandstats (after CONFIG
# RESETSTAT). Needs h2load, redis-server and the bench tools (cargo build --release -p
# turnstile-bench).
#   ./scripts/redis-cpu.sh [TURNSTILE_BINARY]
set -u
cd "$(dirname "$0")/.."
bin=${1:-target/release/turnstile}
work=$(mktemp -d)
taskset -c 1 redis-server --port 21431 --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >/dev/null &
rs=$!
sleep 0.5
for d in 1 5; do target/release/turnstile-loadgen --dump-body "$work/req$d.bin" --descriptors "$d" --domain bench >/dev/null 2>&1; done
hz=$(getconf CLK_TCK)
for d in 1 5; do
  env GRPC_HOST=127.0.0.1 GRPC_PORT=18191 HOST=127.0.0.1 PORT=18192 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18193 SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:21431 taskset -c 0 "$bin" --config-dir scripts/bench-rules 2>/dev/null &
  srv=$!
  sleep 1
  redis-cli -p 21431 CONFIG RESETSTAT >/dev/null
  r0=$(redis-cli -p 21431 INFO cpu | awk -F: '/used_cpu_(sys|user):/ {s+=$2} END {print s}')
  t0=$(awk '{print $14 + $15}' /proc/$srv/stat)
  out=$(taskset -c 1 h2load -D 10 -c 4 -m 32 -t 1 --data="$work/req$d.bin" -H 'content-type: application/grpc' -H 'te: trailers' http://127.0.0.1:18191/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit 2>/dev/null)
  t1=$(awk '{print $14 + $15}' /proc/$srv/stat)
  r1=$(redis-cli -p 21431 INFO cpu | awk -F: '/used_cpu_(sys|user):/ {s+=$2} END {print s}')
  calls=$(echo "$out" | awk '/^requests:/ {print $8}')
  rps=$(echo "$out" | awk '/finished in/ {print $4}')
  echo "== $d descriptor(s): $rps req/s, $calls calls"
  awk -v t=$((t1 - t0)) -v hz=$hz -v n=$calls -v r0=$r0 -v r1=$r1 'BEGIN {printf "turnstile CPU %.2f s = %.1f us/call; redis CPU %.2f s = %.1f us/call\n", t/hz, t/hz*1e6/n, r1-r0, (r1-r0)*1e6/n}'
  redis-cli -p 21431 INFO commandstats | grep -E "cmdstat_(evalsha|eval|incrby|expire|ping)" | tr -d '\r' | sed 's/^/  /'
  kill -INT $srv; wait $srv 2>/dev/null
done
kill $rs; rm -rf "$work"
