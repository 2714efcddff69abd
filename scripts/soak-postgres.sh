#!/usr/bin/env bash
# PostgreSQL under a stream of distinct keys: every request a key never seen before, on a limit
# of one second, for a few minutes; every 15 s, the counters table's rows and its size with
# indexes (the sweeper and row reuse must keep both flat), and the requests so far.
# Prints a markdown table.   ./scripts/soak-postgres.sh [SECONDS]   (needs PostgreSQL)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-180}
. scripts/lib/build.sh && release_build --workspace --bins >/dev/null 2>&1
bin=target/release
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
work=$(mktemp -d)
chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  as_pg "$pgbin/pg_ctl" -D "$work/data" stop -m immediate >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
as_pg "$pgbin/initdb" -D "$work/data" -U postgres --auth=trust -E UTF8 >/dev/null
as_pg taskset -c 1 "$pgbin/pg_ctl" -D "$work/data" -l "$work/log" -w start \
  -o "-p 21641 -k $work -c listen_addresses=127.0.0.1 -c synchronous_commit=off" >/dev/null
mkdir -p "$work/rules"
printf 'domain: soak\ndescriptors:\n  - key: fresh\n    rate_limit: { unit: second, requests_per_unit: 1000 }\n' >"$work/rules/soak.yaml"
env GRPC_HOST=127.0.0.1 GRPC_PORT=18391 HOST=127.0.0.1 PORT=18392 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18393 \
  SHUTDOWN_DRAIN_SECONDS=0 BACKEND_TYPE=postgres POSTGRES_URL=postgres://postgres@127.0.0.1:21641/postgres \
  POSTGRES_POOL_SIZE=4 taskset -c 0 "$bin/turnstile" --config-dir "$work/rules" 2>/dev/null & pids+=($!)
wait_port 18391
taskset -c 1 "$bin/turnstile-loadgen" --addr 127.0.0.1:18391 --duration "$secs" --connections 4 \
  --concurrency 64 --domain soak --key fresh --unique --keys 1000000000 >"$work/lg.json" & pids+=($!)
q() { as_pg "$pgbin/psql" -h 127.0.0.1 -p 21641 -U postgres -At -c "$1"; }
echo "# $(date -u +%FT%TZ) PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}'), a new key every request, limit of one second"
echo
echo "| seconds | requests so far | live rows | counters table + indexes (MB) |"
echo "|---|---|---|---|"
for t in $(seq 15 15 "$secs"); do
  sleep 15
  rows=$(q "SELECT count(*) FROM turnstile.counters" 2>/dev/null || echo 0)
  size=$(q "SELECT round(pg_total_relation_size('turnstile.counters') / 1048576.0, 1)" 2>/dev/null || echo 0)
  reqs=$(curl -s 127.0.0.1:18393/metrics | sed -nE 's/^ratelimit_service_total_requests\{[^}]*\} ([0-9]+)/\1/p')
  echo "| $t | $reqs | $rows | $size |"
done
wait "${pids[1]}" 2>/dev/null || true
echo
echo "load generator: $(cat "$work/lg.json")"
