#!/usr/bin/env sh
# Assembles the file system of Turnstile's container image in DIR from BINARY: the binary
# (/bin/turnstile, and /bin/ratelimit beside it), exactly the shared libraries `ldd` names, CA
# roots, a passwd/group with the non-root user 65532, and the example rules at the reference's
# default RUNTIME_ROOT. Used by scripts/image.sh (buildah) and deploy/Dockerfile alike, so both
# build the same image.
#   scripts/image-root.sh BINARY DIR
set -eu
binary=$1
root=$2
rules=$(dirname "$0")/../config

install -D -m 0755 "$binary" "$root/bin/turnstile"
strip --strip-debug "$root/bin/turnstile" 2>/dev/null || true
ln -sf turnstile "$root/bin/ratelimit"

# Exactly the shared libraries the binary loads, at the paths the loader looks for them.
for lib in $(ldd "$binary" | grep -Eo '/[^ ]+' | sort -u); do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done

# CA roots (TLS to Redis and to a control plane verify against the system's roots by default).
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"

# The non-root user, by name too (as distroless's `nonroot`).
install -d "$root/etc" "$root/home/nonroot" "$root/tmp"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"

# The example rules where the reference's defaults look for them.
install -d "$root/srv/runtime_data/current/config"
cp "$rules"/*.yaml "$root/srv/runtime_data/current/config/"
