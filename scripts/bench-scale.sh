#!/usr/bin/env bash
# How the cost grows with the work: throughput, p50 and p99 against connections (8, 100, 1,000,
# 10,000), descriptors per request (1, 5, 20), servers (memcached 1, 3, 6; Redis 1 and clusters
# of 3 and 6 masters), and RSS against live keys (1 M, 10 M on memory). The no-op floor
# (turnstile-floor: the same tonic stack answering a constant OK) is measured in the same rounds
# and every point is also given as its ratio to the floor's. Server on core 0 (one worker
# thread), h2load and the stores on core 1 (2 cores here: the stores share the client's core).
# Writes FIGURES.tsv and a markdown table to OUT (default target/bench-scale), and draws the
# figures as SVG charts (scripts/bench-scale-charts.py). Medians of ROUNDS interleaved rounds.
#   [OUT=dir] [ONLY="connections descriptors servers keys"] ./scripts/bench-scale.sh [SECONDS] [ROUNDS]
# Connections: the requests in flight are the same at every point (256: 8 x 32, 100 x 3, then
# one per connection), so the offered load is spread over the connections, not multiplied by
# them. h2load has one client address; as root the script gives each connection one of its
# own (an iptables SNAT rule per address, taken in turn: `statistic --mode nth`), as a mesh's
# sidecars are, so per-peer limits apply at their defaults (series "memory"). "memory, one
# peer" is the same load from one address with the per-peer caps raised: every connection of
# it shares one part at the door and takes turns at its gate.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5} rounds=${2:-3}
out=${OUT:-target/bench-scale}
only=${ONLY:-connections descriptors servers keys}
command -v h2load >/dev/null || { echo "install nghttp2-client (h2load)"; exit 1; }
. scripts/lib/nat-peers.sh
. scripts/lib/build.sh && release_build --workspace --bins >/dev/null 2>&1
bin=target/release
mkdir -p "$out"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  nat_peers_clear bench-scale
  rm -rf "$work"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; return 1; }

mc_ports=(21461 21462 21463 21464 21465 21466)
for port in "${mc_ports[@]}"; do
  taskset -c 1 memcached -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 1024 -u root & pids+=($!)
  wait_port "$port"
done
redis() { # port [cluster]
  mkdir -p "$work/redis$1"
  taskset -c 1 redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/redis$1" \
    ${2:+--cluster-enabled yes --cluster-config-file nodes.conf} >/dev/null & pids+=($!)
  wait_port "$1"
}
cluster() { # first-port masters -> the REDIS_URL
  local urls=() port
  for port in $(seq "$1" $(($1 + $2 - 1))); do redis "$port" cluster; urls+=("127.0.0.1:$port"); done
  redis-cli -p "$1" --cluster create "${urls[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
  until redis-cli -p "$1" cluster info | grep -q cluster_state:ok; do sleep 0.1; done
  (IFS=,; echo "${urls[*]}")
}
if [[ " $only " == *" servers "* ]]; then
  redis 21471
  cluster3=$(cluster 21481 3)
  cluster6=$(cluster 21491 6)
fi
mc() { local list=() i; for i in $(seq 0 $(($1 - 1))); do list+=("127.0.0.1:${mc_ports[$i]}"); done; (IFS=,; echo "${list[*]}"); }

start() { # name ENV... ; sets $server
  if [ "$1" = floor ]; then
    taskset -c 0 "$bin/turnstile-floor" 127.0.0.1:18181 & server=$!
  else
    shift
    env GRPC_HOST=127.0.0.1 GRPC_PORT=18181 HOST=127.0.0.1 PORT=18182 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18183 \
      SHUTDOWN_DRAIN_SECONDS=0 GRPC_MAX_CONNECTIONS=20000 "$@" \
      taskset -c 0 "$bin/turnstile" --config-dir scripts/bench-rules 2>/dev/null & server=$!
  fi
  wait_port 18181
}
stop() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
rss_mb() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$server/status"; }

h2() { # connections streams descriptors -> "rps p50_ms p99_ms rss_mb"
  [ -f "$work/req$3.bin" ] || "$bin/turnstile-loadgen" --dump-body "$work/req$3.bin" --descriptors "$3" --domain bench
  rm -f "$work/log"
  taskset -c 1 h2load -D "$secs" -c "$1" -m "$2" -t 1 --data="$work/req$3.bin" --log-file="$work/log" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    http://127.0.0.1:18181/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit >/dev/null 2>&1 &
  local client=$! rss=0 now
  # RSS at its highest while the connections are open (sampled every half second).
  while kill -0 "$client" 2>/dev/null; do now=$(rss_mb); rss=$(echo "$now $rss" | awk '{print ($1 > $2) ? $1 : $2}'); sleep 0.5; done
  wait "$client" || true
  sort -n -k3 "$work/log" | awk -v secs="$secs" -v rss="$rss" '
    { d[NR] = $3 } END {
      if (NR == 0) { print 0, "-", "-", rss; exit }
      printf "%.0f %.2f %.2f %s\n", NR / secs, d[int(NR * 0.5) + 1] / 1000, d[int(NR * 0.99) + 1] / 1000, rss }'
}

tsv="$out/FIGURES.tsv"
echo -e "dimension\tx\tseries\trps\tp50_ms\tp99_ms\trss_mb\tratio" > "$tsv"
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# point DIMENSION X "SERIES|ENV" ... -- CONNS STREAMS DESCRIPTORS: interleaved rounds of every
# series at one point; the first series is the floor the others are divided by.
point() {
  local dim=$1 x=$2; shift 2
  local specs=() s
  while [ "$1" != -- ]; do specs+=("$1"); shift; done
  shift
  declare -A runs=()
  for _ in $(seq "$rounds"); do
    for s in "${specs[@]}"; do
      IFS='|' read -r name envs <<<"$s"
      # shellcheck disable=SC2086
      if [[ $name == floor* ]]; then start floor; else start turnstile $envs; fi
      runs[$name]+="$(h2 "$@")"$'\n'
      stop
    done
  done
  local floor_rps=
  for s in "${specs[@]}"; do
    name=${s%%|*}
    local rps p50 p99 rss
    rps=$(echo -n "${runs[$name]}" | awk '{print $1}' | median)
    p50=$(echo -n "${runs[$name]}" | awk '{print $2}' | median)
    p99=$(echo -n "${runs[$name]}" | awk '{print $3}' | median)
    rss=$(echo -n "${runs[$name]}" | awk '{print $4}' | median)
    [ -z "$floor_rps" ] && floor_rps=$rps
    ratio=$(awk -v a="$rps" -v b="$floor_rps" 'BEGIN {printf "%.2f", (b > 0) ? a / b : 0}')
    echo -e "$dim\t$x\t$name\t$rps\t$p50\t$p99\t$rss\t$ratio" >> "$tsv"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$dim" "$x" "$name" "$rps" "$p50" "$p99" "$rss" "$ratio"
  done
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), ${secs} s x ${rounds} rounds"
echo
echo "| dimension | x | series | calls/s | p50 ms | p99 ms | RSS MB | ratio to the first |"
echo "|---|---|---|---|---|---|---|---|"
memcached1="BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=$(mc 1)"
if [[ " $only " == *" connections "* ]]; then
  one_peer="memory, one peer|BACKEND_TYPE=memory GRPC_MAX_CONNECTIONS_PER_PEER=20000"
  for shape in "8 32" "100 3" "1000 1" "10000 1"; do
    read -r conns streams <<<"$shape"
    if nat_peers 10000 18181 bench-scale; then
      point connections "$conns" "floor|" "memory|BACKEND_TYPE=memory" -- "$conns" "$streams" 1
      nat_peers_clear bench-scale
      point connections "$conns" "floor, one address|" "$one_peer" -- "$conns" "$streams" 1
    else
      point connections "$conns" "floor|" "$one_peer" -- "$conns" "$streams" 1
    fi
  done
fi
if [[ " $only " == *" descriptors "* ]]; then
  for d in 1 5 20; do
    point descriptors "$d" "floor|" "memory|BACKEND_TYPE=memory" "memcached|$memcached1" -- 8 32 "$d"
  done
fi
if [[ " $only " == *" servers "* ]]; then
  for n in 1 3 6; do
    cluster_url=; [ "$n" = 3 ] && cluster_url=$cluster3; [ "$n" = 6 ] && cluster_url=$cluster6
    if [ "$n" = 1 ]; then
      redis_env="BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:21471"
    else
      redis_env="BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_TYPE=cluster REDIS_URL=$cluster_url"
    fi
    point servers "$n" "floor|" "memcached|BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=$(mc "$n")" "redis|$redis_env" -- 8 32 5
  done
fi
if [[ " $only " == *" keys "* ]]; then
  for keys in 1000000 10000000; do
    # Counted per hour (key `hourly`): every key sent is still live when RSS is read.
    start turnstile BACKEND_TYPE=memory MEMORY_MAX_KEYS=$((keys + keys / 50))
    base=$(rss_mb)
    taskset -c 1 "$bin/turnstile-loadgen" --addr 127.0.0.1:18181 --connections 4 --concurrency 64 \
      --unique --requests "$keys" --duration 900 --domain bench --key hourly >/dev/null
    full=$(rss_mb)
    stop
    per_key=$(awk -v a="$full" -v b="$base" -v k="$keys" 'BEGIN {printf "%.0f", (a - b) * 1048576 / k}')
    echo -e "keys\t$keys\tmemory\t-\t-\t-\t$full\t-" >> "$tsv"
    printf '| keys | %s | memory (RSS %s MB at start, %s bytes per key) | - | - | - | %s | - |\n' "$keys" "$base" "$per_key" "$full"
  done
fi
echo
python3 scripts/bench-scale-charts.py "$tsv" "$out" | sed 's/^/chart: /'
