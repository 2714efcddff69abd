#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 20), seeded from fuzz/seeds, and prints the
# executions each made. Needs the nightly toolchain (exits 2 without one) and cargo-fuzz
# (installed when missing).
#   ./scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-20}
# Exit 2 (a visible skip) where there is no nightly toolchain: cargo fuzz needs one.
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "SKIPPED: no nightly Rust toolchain here; the fuzz targets need one (cargo fuzz)"
  exit 2
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
for target in rule_file request_protobuf json_body memcached_replies redis_replies rlqs_report statsd_lines frames; do
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
