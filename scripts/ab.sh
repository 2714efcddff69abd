#!/usr/bin/env bash
# A/B of two Turnstile binaries, interleaved so the machine's drift hits both alike: for each
# round, each binary serves h2load (one pre-encoded request, 4 connections x 32 streams) on the
# memory backend (1 and 5 descriptors), on one memcached (1 and 5 descriptors) and on three
# memcached servers (5 descriptors); with FLOOR=1 the no-op floor (turnstile-floor, the same
# tonic stack answering a constant OK, on Turnstile's runtime) runs in every round too and each
# median is also given as a ratio to the floor's; FLOOR=2 adds a second floor on Tokio's
# default runtime (LIFO slot on: the floor issue 20 was first measured against), column D.
# Prints one line per run, the median requests/s per binary and shape, and the median of each
# round's ratios (B / floor, B / A: runs of the same round, in alternating order).
# REDIS=1 adds one redis-server (1 and 5 descriptors) and a 3-master cluster (5 descriptors);
# ONLY="<shape> …" (memory, memcached, memcached-x3, redis, redis-cluster) runs those alone.
# MEASURE=cpu measures instead the server's CPU per call at a fixed 40,000 calls/s (h2load
# --rps, 4 x 10,000; CPU from /proc/PID/stat), given as calls per CPU-second: a measure that
# does not depend on the client's core (on this shared machine it scatters about as much as
# the saturated rate, ±15 % between rounds).
#   [FLOOR=1|2] [MEASURE=cpu] ./scripts/ab.sh BINARY_A BINARY_B [SECONDS] [ROUNDS]
#   (needs h2load, memcached, the bench tools: cargo build --release -p turnstile-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 secs=${3:-5} rounds=${4:-3}
tools=${TOOLS:-target/release}
work=$(mktemp -d)
mcs=()
for port in 21421 21422 21423; do
  taskset -c 1 memcached -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 256 -u root & mcs+=($!)
done
trap 'kill "${mcs[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
if [ "${REDIS:-0}" = 1 ]; then
  mkdir -p "$work/redis"
  taskset -c 1 redis-server --port 21431 --bind 127.0.0.1 --save "" --appendonly no --dir "$work/redis" >/dev/null & mcs+=($!)
  wait_port 21431
  for port in 21451 21452 21453; do
    mkdir -p "$work/redis$port"
    taskset -c 1 redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/redis$port" \
      --cluster-enabled yes --cluster-config-file nodes.conf >/dev/null & mcs+=($!)
    wait_port "$port"
  done
  redis-cli -p 21451 --cluster create 127.0.0.1:21451 127.0.0.1:21452 127.0.0.1:21453 --cluster-replicas 0 --cluster-yes >/dev/null
  until redis-cli -p 21451 cluster info | grep -q cluster_state:ok; do sleep 0.1; done
fi
for port in 21421 21422 21423; do wait_port "$port"; done
for d in 1 5; do "$tools/turnstile-loadgen" --dump-body "$work/req$d.bin" --descriptors "$d" --domain bench; done
run() { # binary descriptors env... -> rps
  local bin=$1 desc=$2; shift 2
  if [ "$bin" = floor ] || [ "$bin" = floor-default ]; then
    local runtime=turnstile; [ "$bin" = floor-default ] && runtime=default
    FLOOR_RUNTIME=$runtime taskset -c 0 "$tools/turnstile-floor" 127.0.0.1:18191 2>/dev/null &
  else
    env GRPC_HOST=127.0.0.1 GRPC_PORT=18191 HOST=127.0.0.1 PORT=18192 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18193 \
      SHUTDOWN_DRAIN_SECONDS=0 MEMCACHE_TIMEOUT=500ms "$@" taskset -c 0 "$bin" --config-dir scripts/bench-rules 2>/dev/null &
  fi
  local server=$!
  wait_port 18191
  local url=http://127.0.0.1:18191/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
  if [ "${MEASURE:-rps}" = cpu ]; then
    local before after calls
    before=$(awk '{print $14 + $15}' "/proc/$server/stat")
    calls=$(taskset -c 1 h2load -D "$secs" -c 4 -m 32 -t 1 --rps 10000 --data="$work/req$desc.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' "$url" 2>/dev/null | awk '/^requests:/ {print $8}')
    after=$(awk '{print $14 + $15}' "/proc/$server/stat")
    # Calls per CPU-second of the server.
    awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$calls" 'BEGIN {printf "%.0f", n / (t / hz)}'
  else
    taskset -c 1 h2load -D "$secs" -c 4 -m 32 -t 1 --data="$work/req$desc.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' "$url" 2>/dev/null |
      awk '/finished in/ {print $4}'
  fi
  # Turnstile drains on SIGINT; the floor has no handler and ends on SIGTERM.
  if [ "$bin" = floor ] || [ "$bin" = floor-default ]; then kill "$server"; else kill -INT "$server"; kill -INT "$server" 2>/dev/null || true; fi
  wait "$server" 2>/dev/null || true
}
declare -A all=()
unit="req/s"; [ "${MEASURE:-rps}" = cpu ] && unit="calls per CPU-second"
which_ones="A B"; [ "${FLOOR:-0}" = 1 ] && which_ones="A B F"; [ "${FLOOR:-0}" = 2 ] && which_ones="A B F D"
shapes=("memory|1|BACKEND_TYPE=memory" "memory|5|BACKEND_TYPE=memory"
  "memcached|1|BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21421"
  "memcached|5|BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21421"
  "memcached-x3|5|BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=127.0.0.1:21421,127.0.0.1:21422,127.0.0.1:21423")
if [ "${REDIS:-0}" = 1 ]; then
  shapes+=("redis|1|BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:21431"
    "redis|5|BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:21431"
    "redis-cluster|5|BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_TYPE=cluster REDIS_URL=127.0.0.1:21451,127.0.0.1:21452,127.0.0.1:21453")
fi
if [ -n "${ONLY:-}" ]; then
  kept=()
  for shape in "${shapes[@]}"; do [[ " $ONLY " == *" ${shape%%|*} "* ]] && kept+=("$shape"); done
  shapes=("${kept[@]}")
fi
for round in $(seq "$rounds"); do
  # Even rounds run the binaries in the reverse order, so drift within a round favours none.
  order=$which_ones
  [ $((round % 2)) = 0 ] && order=$(echo "$which_ones" | tr ' ' '\n' | tac | tr '\n' ' ')
  for shape in "${shapes[@]}"; do
    IFS='|' read -r name desc envs <<<"$shape"
    for which in $order; do
      case $which in A) bin=$a ;; B) bin=$b ;; F) bin=floor ;; D) bin=floor-default ;; esac
      # shellcheck disable=SC2086
      rps=$(run "$bin" "$desc" $envs)
      echo "round $round $which $name $desc descriptors: $rps $unit"
      all["$which|$name|$desc"]+="$rps "
    done
  done
done
median() { echo "$@" | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# The median over rounds of NUMERATORS[i] / DENOMINATORS[i] (two runs of the same round), and
# the ratios themselves: drift between rounds cancels, which a ratio of medians does not do.
per_round() {
  local -a n=($1) d=($2)
  local r=()
  for i in "${!n[@]}"; do r+=("$(echo "${n[$i]} / ${d[$i]}" | bc -l)"); done
  printf '%.3f (%s)' "$(median "${r[@]}")" "$(printf '%.3f ' "${r[@]}" | sed 's/ $//')"
}
echo
if [ "${FLOOR:-0}" = 2 ]; then
  echo "| shape | floor median $unit | A median | A / floor | B median | B / floor | B / A | default-runtime floor | B / that floor |"
  echo "|---|---|---|---|---|---|---|---|---|"
elif [ "${FLOOR:-0}" = 1 ]; then
  echo "| shape | floor median $unit | A median | A / floor | B median | B / floor | B / A |"
  echo "|---|---|---|---|---|---|---|"
else
  echo "| shape | A median $unit | B median | B / A |"
  echo "|---|---|---|---|"
fi
for shape in "${shapes[@]}"; do
  IFS="|" read -r name desc _ <<<"$shape"; key="$name|$desc"
  ma=$(median ${all["A|$key"]}) mb=$(median ${all["B|$key"]})
  if [ "${FLOOR:-0}" != 0 ]; then
    mf=$(median ${all["F|$key"]})
    printf '| %s descriptors | %.0f | %.0f | %.3f | %.0f | %.3f | %.3f |' "${key/|/ }" "$mf" "$ma" \
      "$(echo "$ma / $mf" | bc -l)" "$mb" "$(echo "$mb / $mf" | bc -l)" "$(echo "$mb / $ma" | bc -l)"
    if [ "${FLOOR:-0}" = 2 ]; then
      md=$(median ${all["D|$key"]})
      printf ' %.0f | %.3f |' "$md" "$(echo "$mb / $md" | bc -l)"
    fi
    echo
  else
    printf '| %s descriptors | %.0f | %.0f | %.3f |\n' "${key/|/ }" "$ma" "$mb" "$(echo "$mb / $ma" | bc -l)"
  fi
done
echo
if [ "${FLOOR:-0}" != 0 ]; then
  echo "| shape | B / floor, median of the rounds' ratios (each round) | B / A, the same |"
  echo "|---|---|---|"
else
  echo "| shape | B / A, median of the rounds' ratios (each round) |"
  echo "|---|---|"
fi
for shape in "${shapes[@]}"; do
  IFS="|" read -r name desc _ <<<"$shape"; key="$name|$desc"
  if [ "${FLOOR:-0}" != 0 ]; then
    echo "| ${key/|/ } descriptors | $(per_round "${all["B|$key"]}" "${all["F|$key"]}") | $(per_round "${all["B|$key"]}" "${all["A|$key"]}") |"
  else
    echo "| ${key/|/ } descriptors | $(per_round "${all["B|$key"]}" "${all["A|$key"]}") |"
  fi
done
