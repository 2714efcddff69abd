#!/usr/bin/env bash
# Turnstile benchmarks, back to back on this machine: the server pinned to core 0, the load
# generator and memcached on core 1. Prints a markdown table (requests/s, p99, ratio to the no-op
# floor measured with the same driver) and the memory footprint of 1M live keys.
#   ./scripts/bench.sh [SECONDS_PER_RUN]      (needs h2load: Debian nghttp2-client; memcached)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
command -v h2load >/dev/null || { echo "install nghttp2-client (h2load)"; exit 1; }
command -v memcached >/dev/null || [ -x /usr/bin/memcached ] || { echo "install memcached"; exit 1; }
. scripts/lib/build.sh && release_build --workspace --bins >/dev/null 2>&1
bin=target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; return 1; }
mc_ports=(21411 21412 21413)
for port in "${mc_ports[@]}"; do
  taskset -c 1 memcached -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 512 -u root & pids+=($!)
  wait_port "$port"
done

# start NAME ENV... : run a server on core 0 at port 18181; sets $server
start() {
  local name=$1; shift
  if [ "$name" = floor ]; then
    taskset -c 0 "$bin/turnstile-floor" 127.0.0.1:18181 & server=$!
  else
    env GRPC_HOST=127.0.0.1 GRPC_PORT=18181 HOST=127.0.0.1 PORT=18182 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18183 \
      SHUTDOWN_DRAIN_SECONDS=0 MEMCACHE_TIMEOUT=500ms "$@" \
      taskset -c 0 "$bin/turnstile" --config-dir scripts/bench-rules 2>/dev/null & server=$!
  fi
  wait_port 18181
}
stop() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }

h2() { # descriptors -> "rps p99_ms"
  "$bin/turnstile-loadgen" --dump-body "$work/req$1.bin" --descriptors "$1" --domain bench
  taskset -c 1 h2load -D "$secs" -c 4 -m 32 -t 1 --data="$work/req$1.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    http://127.0.0.1:18181/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit 2>/dev/null |
    awk '/finished in/ {rps=$4} /time for request/ {p=$6} END {print rps, p}'
}
lg() { taskset -c 1 "$bin/turnstile-loadgen" --addr 127.0.0.1:18181 --duration "$secs" --connections 4 --concurrency 64 --domain bench "$@"; }
field() { sed -E "s/.*\"$1\":([0-9.]+).*/\1/"; }

memcached1="BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21411"
memcached3="BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21411,127.0.0.1:21412,127.0.0.1:21413"
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo
echo "## h2load (one pre-encoded request: the same keys every call), 4 connections x 32 streams"
echo
echo "| server | descriptors | requests/s | mean latency | ratio to floor (same descriptors) |"
echo "|---|---|---|---|---|"
declare -A floor=()
for spec in "floor|1|" "floor|5|" "memory|1|BACKEND_TYPE=memory" "memory|5|BACKEND_TYPE=memory" \
            "memcached x1 (pipelined)|1|$memcached1" "memcached x1 (pipelined)|5|$memcached1" \
            "memcached x3 (pipelined)|5|$memcached3" "memcached x1 (bb8 pool)|1|$memcached1 MEMCACHE_CLIENT=pool MEMCACHE_MAX_IDLE_CONNS=64"; do
  IFS='|' read -r name desc envs <<<"$spec"
  if [ "$name" = floor ]; then start floor; else start turnstile $envs; fi
  read -r rps mean < <(h2 "$desc")
  stop
  [ "$name" = floor ] && floor[$desc]=$rps
  printf '| %s | %s | %.0f | %s | %.2f |\n' "$name" "$desc" "$rps" "$mean" "$(echo "$rps / ${floor[$desc]}" | bc -l)"
done

echo
echo "## turnstile-loadgen (tonic client; random keys), 4 connections x 64 in flight"
echo
echo "| server | descriptors | keys | requests/s | p50 µs | p99 µs | p99.9 µs | OK | OVER_LIMIT | errors | ratio to floor (same descriptors) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
floor=()
for spec in "floor|1|100000|" "floor|5|100000|" "memory|1|100000|BACKEND_TYPE=memory" "memory|1|hot|BACKEND_TYPE=memory" "memory|5|100000|BACKEND_TYPE=memory" \
            "memcached x1|1|100000|$memcached1" "memcached x1|1|hot|$memcached1" "memcached x1|5|100000|$memcached1" "memcached x3|5|100000|$memcached3"; do
  IFS='|' read -r name desc keys envs <<<"$spec"
  if [ "$name" = floor ]; then start floor; else start turnstile $envs; fi
  if [ "$keys" = hot ]; then out=$(lg --descriptors "$desc" --hot-share 1); else out=$(lg --descriptors "$desc" --keys "$keys"); fi
  stop
  rps=$(field rps <<<"$out")
  [ "$name" = floor ] && floor[$desc]=$rps
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n' "$name" "$desc" "$keys" "$rps" \
    "$(field p50_us <<<"$out")" "$(field p99_us <<<"$out")" "$(field p999_us <<<"$out")" \
    "$(field ok <<<"$out")" "$(field over_limit <<<"$out")" "$(field errors <<<"$out")" "$(echo "$rps / ${floor[$desc]}" | bc -l)"
done

echo
echo "## Latency at half of peak load (turnstile-loadgen --rate --spin)"
echo
echo "Every row paces by spinning on the load generator's core (\`--spin\`: its runtime never parks,"
echo "so answers are read at once and requests leave at their instants). This section's memcached"
echo "servers share that core at real-time priority (\`chrt -f\`, when allowed), so they answer as"
echo "soon as a command arrives instead of waiting for the spinning client's time slice. The floor"
echo "is run at each row's offered rate: what the client measures there is the load generator and"
echo "the kernel, and Turnstile's own part is the difference. \"server p99\" is the bucket of"
echo "Turnstile's \`ratelimit_service_response_time_seconds\` histogram that holds the 99th"
echo "percentile (the handler's time, HTTP/2 excluded); \"server CPU\" is the share of core 0 the"
echo "server used meanwhile (paced calls come in small batches, so they cost more than at peak)."
echo
echo "| server | descriptors | peak requests/s | offered requests/s | p50 µs | p99 µs | p99.9 µs | floor p50 / p99 / p99.9 µs | server p99 | server CPU |"
echo "|---|---|---|---|---|---|---|---|---|---|"
lat_ports=(21414 21415 21416)
rt=""; chrt -f 10 true 2>/dev/null && rt="chrt -f 10"
for port in "${lat_ports[@]}"; do
  taskset -c 1 $rt memcached -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 512 -u root & pids+=($!)
  wait_port "$port"
done
# The bucket bound (seconds) that holds the 99th percentile of the handler's latency.
server_p99() {
  curl -s http://127.0.0.1:18183/metrics | awk '
    /^ratelimit_service_response_time_seconds_count/ {n = $2}
    /^ratelimit_service_response_time_seconds_bucket/ {
      match($0, /le="[^"]*"/); le[++k] = substr($0, RSTART + 4, RLENGTH - 5); c[k] = $2 }
    END { for (i = 1; i <= k; i++) if (n > 0 && c[i] >= 0.99 * n) {
      if (le[i] == "+Inf") print "> 5 s"; else printf "≤ %g µs\n", le[i] * 1e6; exit } }'
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
lat1="BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21414"
lat3="BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21414,127.0.0.1:21415,127.0.0.1:21416"
for spec in "memory|1|BACKEND_TYPE=memory" "memcached x1|1|$lat1" "memcached x3|5|$lat3"; do
  IFS='|' read -r name desc envs <<<"$spec"
  start turnstile $envs
  peak=$(lg --descriptors "$desc" | field rps)
  half=$(echo "$peak / 2" | bc)
  before=$(cpu_ticks)
  out=$(lg --descriptors "$desc" --rate "$half" --spin)
  busy=$(awk -v t=$(($(cpu_ticks) - before)) -v hz="$(getconf CLK_TCK)" -v s="$secs" 'BEGIN {printf "%.0f %%", 100 * t / hz / s}')
  p99=$(server_p99)
  stop
  start floor
  fl=$(lg --descriptors "$desc" --rate "$half" --spin)
  stop
  printf '| %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s | %s |\n' "$name" "$desc" "$peak" "$(field rps <<<"$out")" \
    "$(field p50_us <<<"$out")" "$(field p99_us <<<"$out")" "$(field p999_us <<<"$out")" \
    "$(field p50_us <<<"$fl")" "$(field p99_us <<<"$fl")" "$(field p999_us <<<"$fl")" "$p99" "$busy"
done

echo "## Unloaded latency (one request in flight)"
echo
echo "| server | descriptors | p50 µs | p99 µs | p99.9 µs |"
echo "|---|---|---|---|---|"
for spec in "floor|1|" "memory|1|BACKEND_TYPE=memory" "memcached x1|1|$memcached1" "memcached x3|5|$memcached3"; do
  IFS='|' read -r name desc envs <<<"$spec"
  if [ "$name" = floor ]; then start floor; else start turnstile $envs; fi
  out=$(taskset -c 1 "$bin/turnstile-loadgen" --addr 127.0.0.1:18181 --duration "$secs" --connections 1 --concurrency 1 --domain bench --descriptors "$desc")
  stop
  printf '| %s | %s | %s | %s | %s |\n' "$name" "$desc" "$(field p50_us <<<"$out")" "$(field p99_us <<<"$out")" "$(field p999_us <<<"$out")"
done

echo
echo "## Memory: 1,000,000 live keys in the memory backend"
echo
start turnstile BACKEND_TYPE=memory
before=$(awk '/VmRSS/ {print $2}' "/proc/$server/status")
out=$(taskset -c 1 "$bin/turnstile-loadgen" --addr 127.0.0.1:18181 --duration 600 --connections 4 --concurrency 64 --domain bench --unique --descriptors 1 --requests 1000000)
n=$(field ok <<<"$out")
after=$(awk '/VmRSS/ {print $2}' "/proc/$server/status")
stop
echo "RSS before: $((before / 1024)) MiB; after $n unique keys: $((after / 1024)) MiB"
