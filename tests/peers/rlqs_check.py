"""RLQS wire checks against Envoy's own generated code (PyPI xds-protos + grpcio).

Commands (run by tests/it/rlqs.rs):
  stream ADDR           a live StreamRateLimitQuotas stream; prints one JSON line per response
  encode-report         prints the hex of a fully populated RateLimitQuotaUsageReports
  decode-response HEX   decodes a RateLimitQuotaResponse encoded by Turnstile; prints it as JSON
"""
import json
import sys

import grpc
from google.protobuf import duration_pb2, json_format
from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc

Reports = rlqs_pb2.RateLimitQuotaUsageReports
Usage = Reports.BucketQuotaUsage


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def usage(bucket, allowed, denied, seconds=1):
    return Usage(bucket_id=rlqs_pb2.BucketId(bucket=bucket),
                 time_elapsed=duration_pb2.Duration(seconds=seconds, nanos=250_000_000),
                 num_requests_allowed=allowed, num_requests_denied=denied)


def full_report():
    return Reports(domain="rlqs", bucket_quota_usages=[
        usage({"user": "alice", "path": "/api"}, 7, 3, seconds=2),
        usage({"name": "catch-all"}, 0, 18446744073709551615),
    ])


def as_json(response):
    return json_format.MessageToJson(response, indent=None, preserving_proto_field_name=True)


def stream(addr):
    """Three reports on one stream: a first sighting of two buckets, alice spending her budget,
    then a report naming another domain (the server ends the stream with INVALID_ARGUMENT)."""
    reports = [
        Reports(domain="rlqs", bucket_quota_usages=[usage({"user": "alice"}, 1, 0),
                                                    usage({"name": "nothing"}, 1, 0)]),
        Reports(domain="rlqs", bucket_quota_usages=[usage({"user": "alice"}, 3, 2)]),
        Reports(domain="another", bucket_quota_usages=[usage({"user": "alice"}, 0, 0)]),
    ]
    import queue
    outbox = queue.Queue()

    def requests():
        while True:
            item = outbox.get()
            if item is None:
                return
            yield item

    with grpc.insecure_channel(addr) as channel:
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(channel)
        responses = stub.StreamRateLimitQuotas(requests(), timeout=10)
        try:
            for report in reports:
                outbox.put(report)
                print(as_json(next(responses)), flush=True)
        except grpc.RpcError as err:
            print(json.dumps({"code": err.code().name, "details": err.details()}), flush=True)
        finally:
            outbox.put(None)


def encode_report():
    print(full_report().SerializeToString().hex())


def decode_response(hexed):
    response = rlqs_pb2.RateLimitQuotaResponse.FromString(bytes.fromhex(hexed))
    print(as_json(response))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "stream":
        stream(sys.argv[2])
    elif cmd == "encode-report":
        encode_report()
    elif cmd == "decode-response":
        decode_response(sys.argv[2])
    else:
        check(False, f"unknown command {cmd}")
