#!/usr/bin/env bash
# Where a call's time goes: perf samples the server (on core 0, one worker thread) while h2load
# (on core 1, 4 connections x 32 streams, 5 descriptors a call) saturates it, and the samples
# are summed by owner (HTTP/2 stack, runtime, kernel, allocator, each Turnstile module) and
# given in µs per call. BENCHMARKS.md, "Where the time goes", is one run of each shape.
#   ./scripts/profile.sh floor|memory|memcached|memcached-x3 [SECONDS]
#   (needs perf (linux-perf), h2load, memcached and the release binaries: scripts/bench.sh
#   builds them)
set -euo pipefail
cd "$(dirname "$0")/.."
shape=${1:?floor, memory, memcached or memcached-x3} secs=${2:-4}
tools=${TOOLS:-target/release}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
servers=""
case $shape in
  memcached) ports=(21421) ;;
  memcached-x3) ports=(21421 21422 21423) ;;
  *) ports=() ;;
esac
for port in "${ports[@]}"; do
  taskset -c 1 memcached -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 256 -u root & pids+=($!)
  wait_port "$port"
  servers+="${servers:+,}127.0.0.1:$port"
done
"$tools/turnstile-loadgen" --dump-body "$work/req.bin" --descriptors 5 --domain bench
case $shape in
  floor) FLOOR_RUNTIME=turnstile taskset -c 0 "$tools/turnstile-floor" 127.0.0.1:18191 2>/dev/null & ;;
  memory) env GRPC_HOST=127.0.0.1 GRPC_PORT=18191 HOST=127.0.0.1 PORT=18192 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18193 \
    SHUTDOWN_DRAIN_SECONDS=0 taskset -c 0 "$tools/turnstile" --config-dir scripts/bench-rules 2>/dev/null & ;;
  memcached | memcached-x3) env GRPC_HOST=127.0.0.1 GRPC_PORT=18191 HOST=127.0.0.1 PORT=18192 DEBUG_HOST=127.0.0.1 \
    DEBUG_PORT=18193 SHUTDOWN_DRAIN_SECONDS=0 MEMCACHE_TIMEOUT=500ms BACKEND_TYPE=memcache MEMCACHE_HOST_PORT="$servers" \
    taskset -c 0 "$tools/turnstile" --config-dir scripts/bench-rules 2>/dev/null & ;;
  *) echo "unknown shape $shape" >&2; exit 2 ;;
esac
server=$!
pids+=("$server")
wait_port 18191
url=http://127.0.0.1:18191/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
taskset -c 1 h2load -D $((secs + 4)) -c 4 -m 32 -t 1 --data="$work/req.bin" \
  -H 'content-type: application/grpc' -H 'te: trailers' "$url" >"$work/h2load.txt" 2>/dev/null &
load=$!
sleep 2
perf record -F 499 --call-graph dwarf,16384 -p "$server" -o "$work/perf.data" -- sleep "$secs" >/dev/null 2>&1
wait "$load"
rps=$(awk '/finished in/ {print $4}' "$work/h2load.txt")
echo "$shape: $rps calls/s while sampled"
perf report -i "$work/perf.data" --no-children -g none --sort dso,symbol --stdio 2>/dev/null | grep '%' |
  sed 's/  */ /g' | awk -v rps="$rps" '
{ pct = $1; sub("%", "", pct); line = $0; c = "other (Turnstile code not named below, closures)"
  if (line ~ /\[k\]/) c = "kernel";
  else if (line ~ /h2::|hyper|tonic::|http::|tower/) c = "HTTP/2 stack (h2, hyper, tonic, http)";
  else if (line ~ /tokio::/) c = "tokio runtime";
  else if (line ~ /_mi_|mi_|malloc|free/) c = "allocator";
  else if (line ~ /memmove|memcpy|memcmp|memset|memchr/) c = "libc mem* (mostly moves in hyper and h2)";
  else if (line ~ /storage::memcached/) c = "storage::memcached";
  else if (line ~ /storage::/) c = "storage (shared: keys, pipelines, deadlines)";
  else if (line ~ /metrics::top/) c = "metrics::top (top limited)";
  else if (line ~ /metrics::/) c = "metrics (other)";
  else if (line ~ /limiter::|rules::/) c = "limiter and rules";
  else if (line ~ /rls::|grpc::|prost/) c = "rls, grpc, prost";
  else if (line ~ /server::|peers::/) c = "server::incoming, admission, peers";
  else if (line ~ /vdso|clock_gettime/) c = "clock reads (vdso)";
  s[c] += pct }
END { for (c in s) printf "%6.2f µs  %5.1f %%  %s\n", s[c] * 1e4 / rps, s[c], c }' | sort -rn
