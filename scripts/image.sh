#!/usr/bin/env bash
# Builds Turnstile's container image without pulling any base image: FROM scratch, assembled
# from the release binary and exactly the files it needs (scripts/image-root.sh: the shared
# libraries `ldd` names, CA roots, a passwd/group with the non-root user 65532, the example
# rules), with buildah from Debian's packages. Prints the image reference on the last line of
# standard output.
#   ./scripts/image.sh [REFERENCE]        (default localhost/turnstile:dev)
#
# The image: /bin/turnstile, and /bin/ratelimit beside it (the command envoyproxy/ratelimit's
# Deployments and Envoy Gateway run); user 65532:65532; ports 8080 (HTTP), 8081 (gRPC), 6070
# (debug); rules at /srv/runtime_data/current/config (the reference's default RUNTIME_ROOT).
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:-localhost/turnstile:dev}
command -v buildah >/dev/null || { echo "install buildah (Debian: apt-get install buildah)" >&2; exit 1; }

. scripts/lib/build.sh && release_build --bin turnstile >&2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

./scripts/image-root.sh target/release/turnstile "$root"

ctr=$(buildah from scratch)
buildah copy --quiet "$ctr" "$root" / >/dev/null
buildah config \
  --user 65532:65532 \
  --port 8080 --port 8081 --port 6070 \
  --entrypoint '["/bin/turnstile"]' \
  --cmd '' \
  --workingdir / \
  --label org.opencontainers.image.title=turnstile \
  "$ctr"
buildah commit --quiet --rm "$ctr" "$ref" >/dev/null
size=$(buildah images --format '{{.Size}}' "$ref" | head -n 1)
echo "image $ref built: $size (binary $(du -h "$root/bin/turnstile" | cut -f1), $(find "$root" -type f | wc -l) files)" >&2
echo "$ref"
