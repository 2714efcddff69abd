#!/usr/bin/env python3
"""Memory per idle HTTP/2 connection of a running server, in bytes.

Opens CONNECTIONS connections to 127.0.0.1:PORT, each from its own 127/8 source address (as a
mesh's sidecars are, so per-peer connection caps do not apply), sends each the client preface
and an empty SETTINGS frame (an idle HTTP/2 connection, as Envoy keeps one to its rate-limit
service between calls), waits until the server's resident memory stops growing, and prints
the server's RSS before and after and the difference per connection. Standard library only.

    ./scripts/idle-connections.py PID PORT [CONNECTIONS]

scripts/bench-scale.sh's connection figures are under load; this is the cost of a connection
that is only open. BENCHMARKS.md gives one run against Turnstile and against the tonic floor.
"""
import resource
import socket
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmRSS for {pid}")


def settled(pid, seconds=10.0):
    """The RSS once it has not grown for a second (or after `seconds`)."""
    last, since, end = rss_kib(pid), time.monotonic(), time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.2)
        now = rss_kib(pid)
        if now > last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 1.0:
            break
    return last


def source(i):
    # 127.1.0.1, 127.1.0.2, ...: 65,000 distinct addresses at most.
    return f"127.{1 + i // 65_000 % 250}.{i // 250 % 260 % 256}.{1 + i % 250}"


def main():
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 5_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1_000), hard))
    before = settled(pid)
    held = []
    for i in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((source(i), 0))
        s.connect(("127.0.0.1", port))
        s.sendall(PREFACE)
        held.append(s)
    # Read the server's SETTINGS (and its ACK) so that nothing stays queued on either side.
    for s in held:
        s.settimeout(5)
        try:
            s.recv(4096)
        except OSError:
            pass
    after = settled(pid)
    per = (after - before) * 1024 / count
    print(f"{count} idle connections: RSS {before / 1024:.1f} -> {after / 1024:.1f} MiB, "
          f"{per:,.0f} bytes per connection")
    for s in held:
        s.close()


if __name__ == "__main__":
    main()
