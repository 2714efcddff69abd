#!/usr/bin/env bash
# Many RLQS streams on one replica: STREAMS simulated Envoys x BUCKETS buckets each, every bucket
# reported every INTERVAL seconds (Envoy 1.40 reports every 5 s), for SECONDS, against one
# Turnstile (release, core 0) on memcached (core 1, with the load generator). Prints the load
# generator's JSON (reports/s, report latency) and the server's RSS, CPU, tasks and tracked
# buckets while the streams are open.
#   ./scripts/bench-rlqs-streams.sh [STREAMS] [BUCKETS] [INTERVAL] [SECONDS]   (needs memcached)
set -euo pipefail
cd "$(dirname "$0")/.."
streams=${1:-2000} buckets=${2:-20} interval=${3:-5} secs=${4:-30}
. scripts/lib/build.sh && release_build --workspace --bins >/dev/null 2>&1
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; return 1; }
taskset -c 1 memcached -l 127.0.0.1 -p 21471 -U 0 -t 1 -m 1024 -u root & pids+=($!)
wait_port 21471
env GRPC_HOST=127.0.0.1 GRPC_PORT=18491 HOST=127.0.0.1 PORT=18492 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18493 \
  SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21471 \
  taskset -c 0 target/release/turnstile --config-dir config 2>"$work/server.log" & server=$!
pids+=($server)
wait_port 18491
metric() { curl -s 127.0.0.1:18493/metrics | awk -v n="$1" 'index($0, n) == 1 {s += $NF} END {print s + 0}'; }
rss() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$server/status"; }
cpu_ms() { echo $(( $(awk '{print $14 + $15}' "/proc/$server/stat") * 1000 / $(getconf CLK_TCK) )); }
idle_rss=$(rss); idle_tasks=$(metric turnstile_runtime_alive_tasks)
taskset -c 1 target/release/turnstile-rlqs-load --addr 127.0.0.1:18491 --streams "$streams" --buckets "$buckets" \
  --interval "$interval" --duration "$secs" --domain rl --key foo >"$work/load.json" 2>&1 & load=$!
cpu_start=$(cpu_ms); t_start=$(date +%s%N)
sleep $((secs / 2))
cpu_before=$(cpu_ms); sleep 5; cpu_per_s=$(( ($(cpu_ms) - cpu_before) / 5 ))
echo "# $(date -u +%FT%TZ) $(nproc) cores; $streams streams x $buckets buckets, reports every ${interval}s, ${secs}s"
echo "| | idle | with the streams open |"
echo "|---|---|---|"
echo "| RSS (MiB) | $idle_rss | $(rss) |"
echo "| tokio tasks | $idle_tasks | $(metric turnstile_runtime_alive_tasks) |"
echo "| RLQS streams open | 0 | $(metric turnstile_rlqs_streams_open) |"
echo "| buckets tracked | 0 | $(metric turnstile_rlqs_buckets_tracked) |"
echo "| server CPU (ms per s) | | $cpu_per_s |"
wait "$load" || echo "load generator failed"
cpu_run=$(( ($(cpu_ms) - cpu_start) * 1000000000 / ($(date +%s%N) - t_start) ))
echo "| server CPU over the whole run (ms per s) | | $cpu_run |"
echo "| responses pushed at a window's end | | $(metric turnstile_rlqs_window_refreshes_total) |"
echo "| store errors | | $(metric turnstile_rlqs_store_errors_total) |"
echo
echo "load generator: $(cat "$work/load.json")"
sleep 1
echo "after the streams closed: $(metric turnstile_rlqs_streams_open) streams, $(metric turnstile_rlqs_buckets_tracked) buckets, $(metric turnstile_runtime_alive_tasks) tasks, RSS $(rss) MiB"
echo "server warnings: $(grep -c WARN "$work/server.log" || true)"
grep WARN "$work/server.log" | sed 's/^.*WARN //' | sort | uniq -c | sort -rn | head -5
