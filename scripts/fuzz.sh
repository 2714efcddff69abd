#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 20), seeded from fuzz/seeds, and prints the
# executions each made. Needs the nightly toolchain and cargo-fuzz (installed when missing).
#   ./scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-20}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
for target in rule_file request_protobuf json_body memcached_replies; do
  mkdir -p "corpus/$target"
  log=$(mktemp)
  # -rss_limit_mb bounds memory; -timeout flags any single input slower than 10 s.
  if ! cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
      -max_total_time="$secs" -rss_limit_mb=4096 -timeout=10 >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz target $target FAILED"
    exit 1
  fi
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
  [ -n "$execs" ] || execs=$(grep -Eo '#[0-9]+' "$log" | tail -n 1 | tr -d '#')
  echo "fuzz $target: ${execs:-?} executions in ${secs}s, no crash"
  rm -f "$log"
done
