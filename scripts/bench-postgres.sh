#!/usr/bin/env bash
# PostgreSQL beside the floor: one PostgreSQL server (a cluster of the script's own, on core 1
# with the load generator; Turnstile on core 0), fixed window and token bucket, 1 and 5
# descriptors per request, random keys out of 100,000, synchronous_commit on and off,
# turnstile-loadgen with 4 connections x 64 in flight. Also prints the round trips per request
# (Turnstile's store calls, turnstile_backend_call_seconds_count, over its requests). Prints a
# markdown table.
# POSTGRES_POOL_SIZE is 4 for the table (statements in flight at once: fewer means more
# requests coalesced into each); a sweep of pool sizes follows for one descriptor.
#   ./scripts/bench-postgres.sh [SECONDS_PER_RUN]   (needs PostgreSQL's initdb and pg_ctl)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
. scripts/lib/build.sh && release_build --workspace --bins >/dev/null 2>&1
bin=target/release
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
work=$(mktemp -d)
chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$work"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  as_pg "$pgbin/pg_ctl" -D "$work/data" stop -m immediate >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; return 1; }
as_pg "$pgbin/initdb" -D "$work/data" -U postgres --auth=trust -E UTF8 >/dev/null
pg() { # synchronous_commit
  as_pg "$pgbin/pg_ctl" -D "$work/data" stop -m fast >/dev/null 2>&1 || true
  as_pg taskset -c 1 "$pgbin/pg_ctl" -D "$work/data" -l "$work/log" -w start \
    -o "-p 21541 -k $work -c listen_addresses=127.0.0.1 -c synchronous_commit=$1 -c max_connections=200" >/dev/null
}
psql_() { as_pg "$pgbin/psql" -h 127.0.0.1 -p 21541 -U postgres -At -c "$1"; }
start() {
  if [ "$1" = floor ]; then
    taskset -c 0 "$bin/turnstile-floor" 127.0.0.1:18191 & server=$!
  else
    env GRPC_HOST=127.0.0.1 GRPC_PORT=18191 HOST=127.0.0.1 PORT=18192 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18193 \
      SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE=postgres POSTGRES_URL=postgres://postgres@127.0.0.1:21541/postgres \
      POSTGRES_POOL_SIZE="${pool:-4}" POSTGRES_TIMEOUT=2s \
      taskset -c 0 "$bin/turnstile" --config-dir scripts/bench-rules 2>/dev/null & server=$!
  fi
  wait_port 18191
}
stop() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; server=""; }
lg() { taskset -c 1 "$bin/turnstile-loadgen" --addr 127.0.0.1:18191 --duration "$secs" --connections 4 --concurrency 64 --domain algorithms --keys 100000 "$@"; }
field() { sed -E "s/.*\"$1\":([0-9.]+).*/\1/"; }
metric() { curl -s 127.0.0.1:18193/metrics | sed -nE "s/^$1(\{[^}]*\})? ([0-9]+).*/\2/p" | head -1; }
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}')"
echo
echo "| synchronous_commit | algorithm | descriptors | requests/s | p50 µs | p99 µs | OK | errors | round trips per request | ratio to floor (same descriptors) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
declare -A floor=()
for desc in 1 5; do
  start floor
  floor[$desc]=$(lg --key fixed --descriptors "$desc" | field rps)
  stop
  printf '| floor (no-op server) | - | %s | %s | | | | | | 1.00 |\n' "$desc" "${floor[$desc]}"
done
for sync in off on; do
  pg "$sync"
  for key in fixed bucket; do
    for desc in 1 5; do
      start turnstile
      out=$(lg --key "$key" --descriptors "$desc")
      calls=$(metric turnstile_backend_call_seconds_count)
      requests=$(metric ratelimit_service_total_requests)
      stop
      rps=$(field rps <<<"$out")
      printf '| %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f |\n' "$sync" "$key" "$desc" "$rps" \
        "$(field p50_us <<<"$out")" "$(field p99_us <<<"$out")" "$(field ok <<<"$out")" \
        "$(field errors <<<"$out")" "$(echo "$calls / $requests" | bc -l)" \
        "$(echo "$rps / ${floor[$desc]}" | bc -l)"
    done
  done
done
echo
echo "| POSTGRES_POOL_SIZE (synchronous_commit=off, fixed window, 1 descriptor) | requests/s | p50 µs | p99 µs | ratio to floor |"
echo "|---|---|---|---|---|"
pg off
for pool in 1 2 4 10 32; do
  export pool
  start turnstile
  out=$(lg --key fixed --descriptors 1)
  stop
  rps=$(field rps <<<"$out")
  printf '| %s | %s | %s | %s | %.2f |\n' "$pool" "$rps" "$(field p50_us <<<"$out")" "$(field p99_us <<<"$out")" "$(echo "$rps / ${floor[1]}" | bc -l)"
done
