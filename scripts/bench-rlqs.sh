#!/usr/bin/env bash
# RLQS against RLS at the same request rate, through a real Envoy: counter-store (memcached)
# commands per second, and Turnstile's CPU per report. One memcached, one Turnstile (release)
# and one Envoy, first with the ratelimit filter (RLS: one descriptor per request,
# deploy/envoy/envoy.yaml's /twoheader route), then with the rate_limit_quota filter (RLQS: one
# bucket per request, deploy/envoy/rlqs.yaml, 1 s reports). h2load drives RATE requests/s over
# HTTP/1.1 for SECONDS, with USERS distinct users (buckets / descriptors). Prints a markdown table.
#   ./scripts/bench-rlqs.sh [SECONDS] [RATE] [USERS]   (needs memcached, h2load, curl, .venv-envoy)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20} rate=${2:-2000} users=${3:-10}
. scripts/lib/build.sh && release_build --bins >/dev/null 2>&1
envoy=.venv-envoy/bin/envoy
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; return 1; }
mkdir -p "$work/rules"
cp config/example.yaml "$work/rules/"
printf 'domain: rlqs\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 6000 }\n' >"$work/rules/rlqs.yaml"
memcached -l 127.0.0.1 -p 21461 -U 0 -t 1 -u root & pids+=($!)
wait_port 21461
env GRPC_HOST=127.0.0.1 GRPC_PORT=18291 HOST=127.0.0.1 PORT=18292 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18293 \
  SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21461 \
  target/release/turnstile --config-dir "$work/rules" 2>/dev/null & server=$!; pids+=($server)
wait_port 18291
mc_ops() { # memcached commands so far: gets, sets, arithmetic, touches
  local sum=0 line
  exec 3<>/dev/tcp/127.0.0.1/21461
  printf 'stats\r\n' >&3
  while IFS= read -r line <&3; do
    line=${line%$'\r'}
    [ "$line" = END ] && break
    set -- $line
    case $2 in cmd_get|cmd_set|cmd_touch|incr_hits|incr_misses|decr_hits|decr_misses) sum=$((sum + $3)) ;; esac
  done
  exec 3<&-
  echo "$sum"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
run() { # name file path header-prefix [extra h2load args...]
  local name=$1 file=$2 path=$3 header=$4
  shift 4
  sed -e "s/turnstile.turnstile.svc.cluster.local, port_value: 8081/127.0.0.1, port_value: 18291/" \
      -e "s/address: 0.0.0.0, port_value: 10000/address: 127.0.0.1, port_value: 18280/" \
      -e "s/port_value: 10001/port_value: 18281/" -e "s/port_value: 9901/port_value: 18282/" \
      "$file" >"$work/envoy.yaml"
  "$envoy" --use-dynamic-base-id --log-level error --concurrency 1 -c "$work/envoy.yaml" >/dev/null 2>&1 & local e=$!
  wait_port 18280
  # One h2load client per user, each at RATE / USERS requests/s.
  local before ticks reports_before
  before=$(mc_ops); ticks=$(cpu_ticks)
  reports_before=$(curl -s 127.0.0.1:18293/metrics | awk '/^turnstile_rlqs_reports_total/ {print $NF}')
  local loads=()
  for u in $(seq "$users"); do
    h2load --h1 -c 1 --rps $((rate / users)) -D "$secs" -H "$header$u" "$@" "http://127.0.0.1:18280$path" \
      >"$work/h2load.$u" 2>&1 & loads+=($!)
  done
  wait "${loads[@]}" || true
  local after requests ops reports cpu_ms
  after=$(mc_ops); cpu_ms=$(( ($(cpu_ticks) - ticks) * 1000 / $(getconf CLK_TCK) ))
  reports=$(( $(curl -s 127.0.0.1:18293/metrics | awk '/^turnstile_rlqs_reports_total/ {print $NF}') - reports_before ))
  requests=$(cat "$work"/h2load.* | awk '/^requests:/ {s += $6} END {print s + 0}')
  ops=$((after - before))
  kill "$e"; wait "$e" 2>/dev/null || true
  printf '| %s | %d | %d | %d | %.3f | %d | %d |\n' "$name" "$((requests / secs))" "$((ops / secs))" "$ops" \
    "$(awk -v o="$ops" -v r="$requests" 'BEGIN {print o / (r > 0 ? r : 1)}')" "$reports" "$cpu_ms"
}
echo "# $(date -u +%FT%TZ) $(nproc) cores; $secs s at $rate requests/s over $users users"
echo "| protocol | requests/s | memcached commands/s | commands | commands per request | RLQS reports | Turnstile CPU (ms) |"
echo "|---|---|---|---|---|---|---|"
# RLS: headers `foo` and `bar` give one descriptor (foo, bar) per request.
run RLS deploy/envoy/envoy.yaml /twoheader "foo: user" -H "bar: b"
run RLQS deploy/envoy/rlqs.yaml / "x-user: user"
