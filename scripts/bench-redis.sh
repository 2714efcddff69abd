#!/usr/bin/env bash
# Redis beside the floor: one redis-server and a 3-master cluster (all on core 1 with the load
# generator; the server on core 0), fixed window and token bucket, 1 and 5 descriptors per
# request, random keys out of 100,000, turnstile-loadgen with 4 connections x 64 in flight.
# Prints a markdown table.   ./scripts/bench-redis.sh [SECONDS_PER_RUN]   (needs redis-server)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
. scripts/lib/build.sh && release_build --workspace --bins >/dev/null 2>&1
bin=target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; return 1; }
redis() { # port [args...]
  local port=$1; shift
  mkdir -p "$work/$port"
  taskset -c 1 redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/$port" "$@" >/dev/null & pids+=($!)
  wait_port "$port"
}
redis 21441
for port in 21451 21452 21453; do redis "$port" --cluster-enabled yes --cluster-config-file nodes.conf; done
redis-cli -p 21451 --cluster create 127.0.0.1:21451 127.0.0.1:21452 127.0.0.1:21453 --cluster-replicas 0 --cluster-yes >/dev/null
until redis-cli -p 21451 cluster info | grep -q cluster_state:ok; do sleep 0.1; done
start() {
  if [ "$1" = floor ]; then
    taskset -c 0 "$bin/turnstile-floor" 127.0.0.1:18191 & server=$!
  else
    shift
    env GRPC_HOST=127.0.0.1 GRPC_PORT=18191 HOST=127.0.0.1 PORT=18192 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18193 \
      SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_TIMEOUT=500ms "$@" \
      taskset -c 0 "$bin/turnstile" --config-dir scripts/bench-rules 2>/dev/null & server=$!
  fi
  wait_port 18191
}
stop() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
lg() { taskset -c 1 "$bin/turnstile-loadgen" --addr 127.0.0.1:18191 --duration "$secs" --connections 4 --concurrency 64 --domain algorithms --keys 100000 "$@"; }
field() { sed -E "s/.*\"$1\":([0-9.]+).*/\1/"; }
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo
echo "| Redis | algorithm | descriptors | requests/s | p50 µs | p99 µs | OK | errors | ratio to floor (same descriptors) |"
echo "|---|---|---|---|---|---|---|---|---|"
declare -A floor=()
for desc in 1 5; do
  start floor
  floor[$desc]=$(lg --key fixed --descriptors "$desc" | field rps)
  stop
  printf '| floor (no-op server) | - | %s | %s | | | | | 1.00 |\n' "$desc" "${floor[$desc]}"
done
for spec in "single|REDIS_TYPE=single REDIS_URL=127.0.0.1:21441" "cluster x3|REDIS_TYPE=cluster REDIS_URL=127.0.0.1:21451,127.0.0.1:21452,127.0.0.1:21453"; do
  IFS='|' read -r name envs <<<"$spec"
  for key in fixed bucket; do
    for desc in 1 5; do
      start turnstile $envs
      out=$(lg --key "$key" --descriptors "$desc")
      stop
      rps=$(field rps <<<"$out")
      printf '| %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n' "$name" "$key" "$desc" "$rps" \
        "$(field p50_us <<<"$out")" "$(field p99_us <<<"$out")" "$(field ok <<<"$out")" \
        "$(field errors <<<"$out")" "$(echo "$rps / ${floor[$desc]}" | bc -l)"
    done
  done
done
