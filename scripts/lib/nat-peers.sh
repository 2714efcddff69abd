# Sourced by the benches that need many peers from one client process. h2load connects from one
# source address; a mesh gives every sidecar its own. As root, nat_peers gives each new
# connection to a port one source address of its own: one iptables SNAT rule per address, taken
# in turn (`statistic --mode nth`: rule i takes every (COUNT - i)-th connection that reaches it,
# so COUNT connections get COUNT addresses, 127.0.1.1, 127.0.1.2, ..., 250 per third octet).
# The NAT table sees only a connection's first packet, so the rules cost nothing per call.
# Every rule carries the comment TAG and nat_peers_clear TAG removes those and no others.
#   nat_peers COUNT PORT TAG [DESTINATION]: 0 when the rules are in, 1 when not root or no iptables
#   nat_peers_clear TAG

nat_peers() {
  local count=$1 port=$2 tag=$3 destination=${4:-}
  [ "$(id -u)" = 0 ] && command -v iptables-restore >/dev/null || return 1
  nat_peers_clear "$tag"
  python3 - "$count" "$port" "$tag" "$destination" <<'PY' | iptables-restore --noflush
import sys
count, port, tag, destination = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
to = f"-d {destination} " if destination else ""
print("*nat")
for i in range(count):
    print(f"-A POSTROUTING -o lo {to}-p tcp --dport {port} -m statistic --mode nth --every {count - i} "
          f"--packet 0 -j SNAT --to-source 127.0.{1 + i // 250}.{1 + i % 250} -m comment --comment {tag}")
print("COMMIT")
PY
}

nat_peers_clear() {
  command -v iptables-save >/dev/null || return 0
  local rules
  rules=$(iptables-save -t nat) # not piped into grep -q: under pipefail its early exit fails the pipe
  grep -q -- "--comment $1" <<<"$rules" || return 0
  grep -v -- "--comment $1" <<<"$rules" | iptables-restore
}
