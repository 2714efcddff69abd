#!/usr/bin/env bash
# Builds the container image (scripts/image.sh), prints its size, then serves from it and calls
# it: `podman run` where the OCI runtime can start it, otherwise (this project's machines: crun
# cannot set rlimits here) the image's own file system mounted (`podman image mount`) and run
# with chroot as the image's user. Says which path ran. Checks: /bin/ratelimit is there, the
# service runs as uid 65532, ShouldRateLimit answers over gRPC (grpcurl) with the example rules
# and /healthcheck says OK; then stops it (SIGTERM, exit 0).
set -euo pipefail
cd "$(dirname "$0")/.."
grpcurl=${GRPCURL:-.venv-peers/bin/grpcurl}
ref=$(./scripts/image.sh "${1:-localhost/turnstile:dev}" | tail -n 1)
echo "==> image $ref: $(podman image inspect --format '{{.Size}}' "$ref" | numfmt --to=iec) ($(podman image inspect --format '{{.User}} {{.Config.Entrypoint}}' "$ref"))"

# Ports of their own, so nothing else on the machine is called by mistake.
env_args=(GRPC_PORT=18481 PORT=18480 DEBUG_PORT=18470 SHUTDOWN_DRAIN_SECONDS=0)
log=$(mktemp)
mnt=""
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  [ -n "${name:-}" ] && podman rm -f "$name" >/dev/null 2>&1 || true
  [ -n "$mnt" ] && podman image unmount "$ref" >/dev/null 2>&1 || true
  rm -f "$log"
}
trap cleanup EXIT

name=turnstile-image-smoke
podman rm -f "$name" >/dev/null 2>&1 || true
envs=(); for e in "${env_args[@]}"; do envs+=(--env "$e"); done
if podman run -d --name "$name" --network host "${envs[@]}" "$ref" /bin/ratelimit >"$log" 2>&1 \
   && sleep 1 && [ "$(podman inspect --format '{{.State.Running}}' "$name" 2>/dev/null)" = true ]; then
  path="podman run"
  uid=$(podman top "$name" uid | tail -n 1 | tr -d ' ')
else
  echo "==> podman run cannot start it here ($(grep -m1 -o 'crun.*' "$log" || tail -n 1 "$log")); running the image's file system with chroot"
  podman rm -f "$name" >/dev/null 2>&1 || true
  name=""
  path="podman image mount + chroot"
  mnt=$(podman image mount "$ref")
  [ -L "$mnt/bin/ratelimit" ] || [ -x "$mnt/bin/ratelimit" ] || { echo "/bin/ratelimit is missing"; exit 1; }
  user=$(podman image inspect --format '{{.User}}' "$ref")
  env -i "${env_args[@]}" "$(command -v chroot)" --userspec="$user" "$mnt" /bin/ratelimit >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/18481) 2>/dev/null && break; sleep 0.1; done
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
fi
echo "==> served from the image by $path, as uid $uid"
[ "$uid" = 65532 ] || { echo "expected uid 65532"; exit 1; }
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/18481) 2>/dev/null && break; sleep 0.1; done
health=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:18480/healthcheck").read().decode())')
[ "$health" = OK ] || { echo "/healthcheck answered '$health'"; cat "$log"; exit 1; }
answer=$("$grpcurl" -plaintext -d '{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"x"},{"key":"bar","value":"y"}]}]}' \
  127.0.0.1:18481 envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit)
echo "$answer" | tr -s ' \n' ' '; echo
echo "$answer" | grep -q '"overallCode": "OK"' || { echo "unexpected answer"; cat "$log"; exit 1; }
echo "$answer" | grep -q '"limitRemaining": 2' || { echo "unexpected answer"; cat "$log"; exit 1; }
if [ -n "${pid:-}" ]; then
  kill -TERM "$pid"
  wait "$pid" && code=0 || code=$?
  pid=""
else
  podman stop -t 5 "$name" >/dev/null
  code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
fi
[ "$code" = 0 ] || { echo "the service exited with $code"; cat "$log"; exit 1; }
echo "==> image: served ShouldRateLimit from $ref by $path and stopped (exit 0)"
