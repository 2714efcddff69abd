#!/usr/bin/env bash
# Each algorithm on the memory store, memcached and Redis (BACKENDS="memory memcached redis"), back to back with the no-op floor, the
# same way as scripts/bench.sh: the server pinned to core 0, the load generator and memcached on
# core 1 (so are memcached and redis-server), turnstile-loadgen with 4 connections x 64 in flight, one descriptor, random keys out
# of 100,000 (and one hot key for the token bucket). Prints a markdown table.
#   ./scripts/bench-algorithms.sh [SECONDS_PER_RUN]      (needs memcached)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
. scripts/lib/build.sh && release_build --workspace --bins >/dev/null 2>&1
bin=target/release
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; return 1; }
taskset -c 1 memcached -l 127.0.0.1 -p 21421 -U 0 -t 1 -m 512 -u root & pids+=($!)
wait_port 21421
taskset -c 1 redis-server --port 21431 --bind 127.0.0.1 --save "" --appendonly no >/dev/null & pids+=($!)
wait_port 21431
start() {
  if [ "$1" = floor ]; then
    taskset -c 0 "$bin/turnstile-floor" 127.0.0.1:18191 & server=$!
  else
    shift
    env GRPC_HOST=127.0.0.1 GRPC_PORT=18191 HOST=127.0.0.1 PORT=18192 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18193 \
      SHUTDOWN_DRAIN_SECONDS=0 MEMCACHE_TIMEOUT=500ms "$@" \
      taskset -c 0 "$bin/turnstile" --config-dir scripts/bench-rules 2>/dev/null & server=$!
  fi
  wait_port 18191
}
stop() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
lg() { taskset -c 1 "$bin/turnstile-loadgen" --addr 127.0.0.1:18191 --duration "$secs" --connections 4 --concurrency 64 --domain algorithms --descriptors 1 "$@"; }
field() { sed -E "s/.*\"$1\":([0-9.]+).*/\1/"; }
memcached="BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21421"
redis="BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:21431 REDIS_TIMEOUT=500ms"
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo
echo "| backend | algorithm | keys | requests/s | p50 µs | p99 µs | OK | OVER_LIMIT | errors | ratio to floor | ratio to fixed window (same backend) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
start floor
floor=$(lg --key fixed --keys 100000 | field rps)
stop
printf '| floor (no-op server) | - | 100000 | %s | | | | | | 1.00 | |\n' "$floor"
for backend in ${BACKENDS:-memory memcached redis}; do
  case $backend in memory) envs="BACKEND_TYPE=memory" ;; memcached) envs=$memcached ;; redis) envs=$redis ;; esac
  fixed=""
  for spec in "fixed|100000" "sliding|100000" "bucket|100000" "inflight|100000" "bucket|hot"; do
    IFS='|' read -r key keys <<<"$spec"
    start turnstile $envs
    if [ "$keys" = hot ]; then out=$(lg --key "$key" --hot-share 1); else out=$(lg --key "$key" --keys "$keys"); fi
    stop
    rps=$(field rps <<<"$out")
    [ "$key" = fixed ] && fixed=$rps
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f |\n' "$backend" "$key" "$keys" "$rps" \
      "$(field p50_us <<<"$out")" "$(field p99_us <<<"$out")" "$(field ok <<<"$out")" \
      "$(field over_limit <<<"$out")" "$(field errors <<<"$out")" \
      "$(echo "$rps / $floor" | bc -l)" "$(echo "$rps / $fixed" | bc -l)"
  done
done
