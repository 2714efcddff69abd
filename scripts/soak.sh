#!/usr/bin/env bash
# Soak: MINUTES (default 10) of a mixed workload at RATE requests/s (default 20000, about half of
# the memcached peak on this machine): 1M random keys with 20 % on one hot key, 2 descriptors per
# request, a rule reload every 30 s, and a memcached restart at the half-way mark. Every 10 s it
# samples the server's RSS, open file descriptors, threads, tokio tasks and open gRPC connections, and the
# error counters, and prints one table; then the load generator's totals. Not part of CI.
#   ./scripts/soak.sh [MINUTES] [RATE]     (needs memcached and the release binaries)
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10} rate=${2:-20000}
secs=$((minutes * 60))
. scripts/lib/build.sh && release_build --workspace --bins >/dev/null 2>&1
work=$(mktemp -d)
mkdir "$work/rules"
cp scripts/bench-rules/*.yaml "$work/rules/"
mc_start() { taskset -c 1 memcached -l 127.0.0.1 -p 21451 -U 0 -t 1 -m 1024 -u root & mc=$!; }
mc_start
sleep 0.3
env GRPC_HOST=127.0.0.1 GRPC_PORT=18391 HOST=127.0.0.1 PORT=18392 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18393 \
  SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21451 \
  taskset -c 0 target/release/turnstile --config-dir "$work/rules" 2>"$work/server.log" & srv=$!
trap 'kill -INT $srv 2>/dev/null; kill -INT $srv 2>/dev/null; kill $mc 2>/dev/null; tail -n 5 "$work/server.log"; rm -rf "$work"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/18391) 2>/dev/null && break; sleep 0.05; done
taskset -c 1 target/release/turnstile-loadgen --addr 127.0.0.1:18391 --duration "$secs" --connections 8 \
  --concurrency 128 --domain bench --descriptors 2 --keys 1000000 --hot-share 0.2 --rate "$rate" >"$work/load.json" &
load=$!
metric() { curl -s 127.0.0.1:18393/metrics | awk -v n="$1" 'index($0, n) == 1 {s += $NF} END {print s + 0}'; }
echo "| t (s) | RSS (MiB) | fds | threads | tasks | gRPC conns | store errors | overloaded | event |"
echo "|---|---|---|---|---|---|---|---|---|"
start=$(date +%s)
while kill -0 "$load" 2>/dev/null; do
  sleep 10
  t=$(( $(date +%s) - start ))
  event=""
  if [ $((t % 30)) -lt 10 ]; then
    # A reload: the rule file changes (a comment line with the time).
    echo "# reload at $t s" >> "$work/rules/bench.yaml"; event="reload"
  fi
  if [ "$t" -ge $((secs / 2)) ] && [ -z "${restarted:-}" ]; then
    kill "$mc"; wait "$mc" 2>/dev/null || true; mc_start; restarted=1; event="$event memcached restart"
  fi
  rss=$(awk '/VmRSS/ {printf "%.1f", $2 / 1024}' /proc/$srv/status)
  fds=$(ls /proc/$srv/fd | wc -l)
  threads=$(awk '/Threads/ {print $2}' /proc/$srv/status)
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "$rss" "$fds" "$threads" \
    "$(metric turnstile_runtime_alive_tasks)" "$(metric turnstile_grpc_connections_open)" "$(metric turnstile_backend_errors_total)" \
    "$(metric turnstile_overloaded_total)" "$event"
done
echo
echo "load generator: $(cat "$work/load.json")"
echo "config loads: $(metric ratelimit_service_config_load_success) ok, $(metric ratelimit_service_config_load_error) failed"
