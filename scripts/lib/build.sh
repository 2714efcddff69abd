# Sourced by the scripts that build release binaries. The service's runtime turns Tokio's LIFO
# slot off only when built with `--cfg tokio_unstable` (.cargo/config.toml; 1.5-1.8x the calls
# per core at saturation, BENCHMARKS.md). Cargo drops the config's rustflags whenever RUSTFLAGS
# (or CARGO_ENCODED_RUSTFLAGS, or CARGO_BUILD_RUSTFLAGS) is set, so a build with its own flags
# would silently lose it: keep_tokio_unstable restores the flag in whichever of them is set, and
# says so on stderr. release_build builds with it kept.

keep_tokio_unstable() {
  for var in RUSTFLAGS CARGO_BUILD_RUSTFLAGS; do
    eval "value=\${$var-}"
    eval "set=\${$var+x}"
    if [ -n "$set" ]; then
      case " $value " in
        *" --cfg tokio_unstable "* | *" --cfg=tokio_unstable "*) ;;
        *)
          eval "export $var=\"\${value:+\$value }--cfg tokio_unstable\""
          echo "note: $var is set without --cfg tokio_unstable; added (the runtime needs it, BENCHMARKS.md)" >&2
          ;;
      esac
    fi
  done
  if [ -n "${CARGO_ENCODED_RUSTFLAGS+x}" ]; then
    sep=$(printf '\037')
    case "$sep$CARGO_ENCODED_RUSTFLAGS$sep" in
      *"$sep--cfg${sep}tokio_unstable$sep"*) ;;
      *)
        CARGO_ENCODED_RUSTFLAGS="${CARGO_ENCODED_RUSTFLAGS:+$CARGO_ENCODED_RUSTFLAGS$sep}--cfg${sep}tokio_unstable"
        export CARGO_ENCODED_RUSTFLAGS
        echo "note: CARGO_ENCODED_RUSTFLAGS is set without --cfg tokio_unstable; added" >&2
        ;;
    esac
  fi
}

# `cargo build --release --locked "$@"` with `--cfg tokio_unstable` kept.
release_build() {
  keep_tokio_unstable
  cargo build --release --locked "$@"
}
