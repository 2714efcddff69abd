"""Wire-compatibility checks against Envoy's own generated code (PyPI xds-protos + grpcio).

Commands (run by tests/it/peers.rs):
  call ADDR             live ShouldRateLimit with every request field set; checks every response field
  encode-request        prints the hex of a fully populated RateLimitRequest (Turnstile decodes it)
  decode-response HEX   decodes a fully populated RateLimitResponse encoded by Turnstile and checks it
  health ADDR           grpc.health.v1 for "", "ratelimit" and an unknown service
  reflect ADDR          server reflection v1: list services, resolve rls.proto and its imports
  loop ADDR SECONDS     calls in a loop on one channel; prints "<ok> <failed>"
"""
import sys

import grpc
from google.protobuf import wrappers_pb2
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

Code = rls_pb2.RateLimitResponse.Code
Unit = rls_pb2.RateLimitResponse.RateLimit.Unit
Desc = ratelimit_pb2.RateLimitDescriptor


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def full_request():
    alice = Desc(entries=[Desc.Entry(key="user", value="alice")], hits_addend=wrappers_pb2.UInt64Value(value=2))
    bob = Desc(entries=[Desc.Entry(key="user", value="bob")],
               limit=Desc.RateLimitOverride(requests_per_unit=7, unit=2))
    carol = Desc(entries=[Desc.Entry(key="user", value="carol")], hits_addend=wrappers_pb2.UInt64Value(value=1))
    if "is_negative_hits" in Desc.DESCRIPTOR.fields_by_name:
        carol.is_negative_hits = True
    else:
        # xds-protos up to 1.85 predates field 4 (`bool is_negative_hits = 4`): append it as
        # Envoy's newer code encodes it (tag 4, varint 1); protobuf keeps it as an unknown field.
        carol = Desc.FromString(carol.SerializeToString() + bytes([4 << 3 | 0, 1]))
    return rls_pb2.RateLimitRequest(domain="wire", descriptors=[alice, bob, carol], hits_addend=1)


def call(addr):
    with grpc.insecure_channel(addr) as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        resp = stub.ShouldRateLimit(full_request(), timeout=5)
    check(resp.overall_code == Code.OK, f"overall {resp.overall_code}")
    check(len(resp.statuses) == 3, "three statuses")
    a, b, c = resp.statuses
    check(a.code == Code.OK and a.limit_remaining == 1, f"alice {a}")
    check(a.current_limit.requests_per_unit == 3 and a.current_limit.unit == Unit.Value("WEEK")
          and a.current_limit.name == "weekly", f"alice limit {a.current_limit}")
    check(0 < a.duration_until_reset.seconds <= 604800 and a.duration_until_reset.nanos == 0, "alice reset")
    check(b.current_limit.requests_per_unit == 7 and b.current_limit.unit == Unit.Value("MINUTE")
          and b.current_limit.name == "" and b.limit_remaining == 6, f"bob {b}")
    check(0 < b.duration_until_reset.seconds <= 60, "bob reset")
    check(c.code == Code.OK and c.limit_remaining == 3, f"carol refund {c}")
    headers = {h.key: h.value for h in resp.response_headers_to_add}
    check(headers.get("RateLimit-Limit") == "3" and headers.get("RateLimit-Remaining") == "1"
          and headers.get("RateLimit-Reset") == str(a.duration_until_reset.seconds), f"headers {headers}")
    md = resp.dynamic_metadata
    check(md.fields["domain"].string_value == "wire", "metadata domain")
    check(md.fields["hitsAddend"].number_value == 1, "metadata hitsAddend")
    check(md.fields["metadata"].struct_value.fields["tier"].string_value == "gold", "metadata merge")
    descs = md.fields["descriptors"].list_value.values
    check([v.string_value for v in descs[0].struct_value.fields["entries"].list_value.values] == ["user=alice"],
          "metadata entries")
    check(descs[1].struct_value.fields["limit"].string_value == "requests_per_unit:7 unit:MINUTE", "metadata limit")
    check(not resp.HasField("quota") and resp.raw_body == b"" and len(resp.request_headers_to_add) == 0, "unset fields")
    print("wire call ok")


def decode_response(hexed):
    resp = rls_pb2.RateLimitResponse.FromString(bytes.fromhex(hexed))
    check(resp.overall_code == Code.OVER_LIMIT, "overall")
    s = resp.statuses[0]
    check(s.code == Code.OVER_LIMIT and s.limit_remaining == 4 and s.current_limit.name == "n"
          and s.current_limit.unit == Unit.Value("WEEK") and s.current_limit.requests_per_unit == 9, f"status {s}")
    check(s.duration_until_reset.seconds == 42 and s.quota.requests == 5 and s.quota.id == "q"
          and s.quota.valid_until.seconds == 1234, f"status quota {s}")
    check(resp.response_headers_to_add[0].key == "k" and resp.response_headers_to_add[0].value == "v", "header")
    check(resp.request_headers_to_add[0].raw_value == b"\x00raw", "raw_value")
    check(resp.raw_body == b"body" and resp.quota.requests == 1, "raw_body, quota")
    check(resp.dynamic_metadata.fields["x"].bool_value is True, "dynamic_metadata")
    print("decode ok")


def health(addr):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    with grpc.insecure_channel(addr) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ["", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"]:
            status = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
            check(status == health_pb2.HealthCheckResponse.SERVING, f"health {service!r} {status}")
        try:
            stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
            check(False, "unknown service must be NOT_FOUND")
        except grpc.RpcError as err:
            check(err.code() == grpc.StatusCode.NOT_FOUND, f"unknown service {err.code()}")
    print("health ok")


def reflect(addr):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
    from google.protobuf.descriptor_pool import DescriptorPool
    with grpc.insecure_channel(addr) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        services = set(db.get_services())
        check("envoy.service.ratelimit.v3.RateLimitService" in services, f"services {services}")
        pool = DescriptorPool(db)
        method = pool.FindMethodByName("envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit")
        check(method.input_type.full_name == "envoy.service.ratelimit.v3.RateLimitRequest", "input type")
        unit = pool.FindEnumTypeByName("envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit")
        check(unit.values_by_name["WEEK"].number == 7, "WEEK = 7")
        hits = pool.FindMessageTypeByName("envoy.extensions.common.ratelimit.v3.RateLimitDescriptor").fields_by_name["hits_addend"]
        check(hits.number == 3 and hits.message_type.full_name == "google.protobuf.UInt64Value", "hits_addend")
        # Reflection v1 has the same messages as v1alpha under another service name.
        from grpc_reflection.v1alpha import reflection_pb2 as rpb
        v1 = channel.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                   request_serializer=rpb.ServerReflectionRequest.SerializeToString,
                                   response_deserializer=rpb.ServerReflectionResponse.FromString)
        answers = list(v1(iter([rpb.ServerReflectionRequest(list_services="")]), timeout=5))
        names = {s.name for s in answers[0].list_services_response.service}
        check("envoy.service.ratelimit.v3.RateLimitService" in names, f"v1 services {names}")
    print("reflection ok")


def loop(addr, seconds):
    """One caller for `seconds`: prints the calls answered and failed."""
    load(addr, seconds, 1)


def load(addr, seconds, threads):
    """`threads` callers on one channel for `seconds`: prints the calls answered and failed."""
    import threading
    import time
    counts = {"ok": 0, "failed": 0}
    lock = threading.Lock()
    request = rls_pb2.RateLimitRequest(domain="ops", descriptors=[Desc(entries=[Desc.Entry(key="user", value="load")])])
    # grpcio's default :authority for a unix: target is the percent-encoded socket path, which
    # the server's HTTP/2 stack (h2) rejects as malformed; name a plain authority instead.
    options = [("grpc.default_authority", "localhost")] if addr.startswith("unix:") else []
    with grpc.insecure_channel(addr, options=options) as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        end = time.monotonic() + seconds

        def caller():
            ok = failed = 0
            while time.monotonic() < end:
                try:
                    stub.ShouldRateLimit(request, timeout=5)
                    ok += 1
                except grpc.RpcError as err:
                    failed += 1
                    print(f"failed: {err.code().name} {err.details()}", file=sys.stderr)
            with lock:
                counts["ok"] += ok
                counts["failed"] += failed

        workers = [threading.Thread(target=caller) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    print(f"{counts['ok']} {counts['failed']}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "call":
        call(sys.argv[2])
    elif cmd == "encode-request":
        print(full_request().SerializeToString().hex())
    elif cmd == "decode-response":
        decode_response(sys.argv[2])
    elif cmd == "health":
        health(sys.argv[2])
    elif cmd == "reflect":
        reflect(sys.argv[2])
    elif cmd == "loop":
        loop(sys.argv[2], float(sys.argv[3]))
    elif cmd == "load":
        load(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(f"unknown command {cmd}")
