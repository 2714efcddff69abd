#!/usr/bin/env bash
# A/B of two Turnstile binaries, interleaved so the machine's drift hits both alike: for each
# round, each binary serves h2load (one pre-encoded request, 4 connections x 32 streams) on the
# memory backend (1 and 5 descriptors) and on one memcached (5 descriptors). Prints one line per
# run and the median requests/s per binary and shape.
#   ./scripts/ab.sh BINARY_A BINARY_B [SECONDS] [ROUNDS]   (needs h2load, memcached, the bench tools)
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 secs=${3:-5} rounds=${4:-3}
tools=${TOOLS:-target/release}
work=$(mktemp -d)
taskset -c 1 memcached -l 127.0.0.1 -p 21421 -U 0 -t 1 -m 256 -u root & mc=$!
trap 'kill $mc 2>/dev/null || true; rm -rf "$work"' EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
wait_port 21421
for d in 1 5; do "$tools/turnstile-loadgen" --dump-body "$work/req$d.bin" --descriptors "$d" --domain bench; done
run() { # binary descriptors env... -> rps
  local bin=$1 desc=$2; shift 2
  env GRPC_HOST=127.0.0.1 GRPC_PORT=18191 HOST=127.0.0.1 PORT=18192 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18193 \
    SHUTDOWN_DRAIN_SECONDS=0 MEMCACHE_TIMEOUT=500ms "$@" taskset -c 0 "$bin" --config-dir scripts/bench-rules 2>/dev/null &
  local server=$!
  wait_port 18191
  taskset -c 1 h2load -D "$secs" -c 4 -m 32 -t 1 --data="$work/req$desc.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    http://127.0.0.1:18191/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit 2>/dev/null |
    awk '/finished in/ {print $4}'
  kill -INT "$server"; kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true
}
declare -A all=()
for round in $(seq "$rounds"); do
  for shape in "memory|1|BACKEND_TYPE=memory" "memory|5|BACKEND_TYPE=memory" "memcached|5|BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21421"; do
    IFS='|' read -r name desc envs <<<"$shape"
    for which in A B; do
      bin=$a; [ "$which" = B ] && bin=$b
      # shellcheck disable=SC2086
      rps=$(run "$bin" "$desc" $envs)
      echo "round $round $which $name $desc descriptors: $rps req/s"
      all["$which|$name|$desc"]+="$rps "
    done
  done
done
echo
echo "| shape | A median req/s | B median req/s | B / A |"
echo "|---|---|---|---|"
for key in "memory|1" "memory|5" "memcached|5"; do
  ma=$(echo ${all["A|$key"]} | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  mb=$(echo ${all["B|$key"]} | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  printf '| %s descriptors | %.0f | %.0f | %.3f |\n' "${key/|/ }" "$ma" "$mb" "$(echo "$mb / $ma" | bc -l)"
done
