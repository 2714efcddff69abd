#!/usr/bin/env bash
# What OpenTelemetry tracing costs: the no-op floor, Turnstile with tracing off, on at 0 (the
# per-call cost of deciding), on at
# TRACING_SAMPLING_RATE=0.01 and on at 1 (every call and its store call a span), interleaved
# round by round (medians), memory backend, 1 descriptor, h2load 4 connections x 32 streams.
# The server runs on core 0; h2load and the OTLP sink (turnstile-otlp-sink, gRPC) on core 1.
# Two measures per run: requests/s at saturation, and the server's CPU per call at a fixed
# 40,000 calls/s (from /proc/PID/stat), which the OTLP sink sharing h2load's core cannot skew
# (at saturation, a sink decoding spans on core 1 slows the load generator, not the server).
# Prints a markdown table and, per traced run, the spans exported and dropped (/metrics).
#   ./scripts/bench-tracing.sh [SECONDS_PER_RUN] [ROUNDS]   (needs h2load: nghttp2-client)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
rounds=${2:-5}
command -v h2load >/dev/null || { echo "install nghttp2-client (h2load)"; exit 1; }
. scripts/lib/build.sh && release_build --workspace --bins >/dev/null 2>&1
bin=target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; return 1; }

taskset -c 1 "$bin/turnstile-otlp-sink" 127.0.0.1:18317 > "$work/sink.out" & sink=$!; pids+=($sink)
wait_port 18317
"$bin/turnstile-loadgen" --dump-body "$work/req.bin" --descriptors 1 --domain bench

start() { # MODE
  if [ "$1" = floor ]; then
    taskset -c 0 "$bin/turnstile-floor" 127.0.0.1:18181 & server=$!
  else
    local tracing=()
    case $1 in
      off) tracing=(TRACING_ENABLED=false) ;;
      0%) tracing=(TRACING_ENABLED=true TRACING_SAMPLING_RATE=0) ;;
      1%) tracing=(TRACING_ENABLED=true TRACING_SAMPLING_RATE=0.01) ;;
      1%-nowhere) tracing=(TRACING_ENABLED=true TRACING_SAMPLING_RATE=0.01 OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9) ;;
      1%-q1) tracing=(TRACING_ENABLED=true TRACING_SAMPLING_RATE=0.01 OTEL_BSP_MAX_QUEUE_SIZE=1 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1) ;;
      100%) tracing=(TRACING_ENABLED=true TRACING_SAMPLING_RATE=1) ;;
    esac
    env GRPC_HOST=127.0.0.1 GRPC_PORT=18181 HOST=127.0.0.1 PORT=18182 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18183 \
      SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE=memory TRACING_EXPORTER_PROTOCOL=grpc \
      OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:18317 "${tracing[@]}" \
      taskset -c 0 "$bin/turnstile" --config-dir scripts/bench-rules 2>/dev/null & server=$!
  fi
  wait_port 18181
}
stop() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
rps() {
  taskset -c 1 h2load -D "$secs" -c 4 -m 32 -t 1 --data="$work/req.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    http://127.0.0.1:18181/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit 2>/dev/null |
    awk '/finished in/ {print $4}'
}
spans() { # exported, dropped (queue full + export failed)
  curl -s http://127.0.0.1:18183/metrics | awk '
    /^turnstile_trace_spans_exported_total/ {e=$NF}
    /^turnstile_trace_spans_dropped_total/ {d+=$NF}
    END {printf "%d exported, %d dropped", e, d}'
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Server CPU microseconds per call at a fixed rate (4 clients x 10,000 calls/s).
cpu_per_call() {
  local before after calls
  before=$(cpu_ticks "$server")
  calls=$(taskset -c 1 h2load -D "$secs" -c 4 -m 32 -t 1 --rps 10000 --data="$work/req.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    http://127.0.0.1:18181/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit 2>/dev/null |
    awk '/^requests:/ {print $8}')
  after=$(cpu_ticks "$server")
  awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$calls" 'BEGIN {printf "%.3f", t / hz * 1e6 / n}'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# MODES="off 0% 1%" narrows the comparison (0%: tracing on, nothing sampled: the per-call cost;
# 1%-nowhere: 1 % sampled, exported to a closed port: the cost without the export's traffic).
read -r -a modes <<< "${MODES:-floor off 0% 1% 100%}"
declare -A runs=() cpus=()
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $rounds rounds of ${secs}s"
for round in $(seq "$rounds"); do
  for mode in "${modes[@]}"; do
    start "$mode"
    c=$(cpu_per_call)
    cpus[$mode]+="$c "
    r=$(rps)
    runs[$mode]+="$r "
    extra=""
    [ "$mode" = 1% ] || [ "$mode" = 100% ] && extra=" ($(spans))"
    echo "round $round $mode: $r req/s, $c µs CPU per call at 40k/s$extra" >&2
    stop
  done
done
f=$(echo "${runs[floor]:-0}" | tr ' ' '\n' | grep . | median)
off=$(echo "${runs[off]}" | tr ' ' '\n' | grep . | median)
coff=$(echo "${cpus[off]}" | tr ' ' '\n' | grep . | median)
echo
echo "| server | CPU per call at 40k/s, µs (median) | CPU ratio to tracing off | requests/s at saturation (median) | ratio to floor | ratio to tracing off |"
echo "|---|---|---|---|---|---|"
for mode in "${modes[@]}"; do
  m=$(echo "${runs[$mode]}" | tr ' ' '\n' | grep . | median)
  cm=$(echo "${cpus[$mode]}" | tr ' ' '\n' | grep . | median)
  echo "| ${mode/floor/no-op floor} | $cm | $(awk -v a="$cm" -v b="$coff" 'BEGIN {printf "%.3f", a/b}') | $m | $(awk -v a="$m" -v b="$f" 'BEGIN {if (b > 0) printf "%.2f", a/b; else printf "-"}') | $(awk -v a="$m" -v b="$off" 'BEGIN {printf "%.3f", a/b}') |"
done
