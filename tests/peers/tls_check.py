"""One ShouldRateLimit call over TLS with Python grpcio. Prints "ok" or "error <code>".

usage: tls_check.py ADDR CA_PEM [CLIENT_CERT_PEM CLIENT_KEY_PEM]   (hostname checked: localhost)
"""
import sys

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc


def read(path):
    with open(path, "rb") as f:
        return f.read()


addr, ca = sys.argv[1], sys.argv[2]
key = read(sys.argv[4]) if len(sys.argv) > 4 else None
chain = read(sys.argv[3]) if len(sys.argv) > 4 else None
creds = grpc.ssl_channel_credentials(root_certificates=read(ca), private_key=key, certificate_chain=chain)
options = [("grpc.ssl_target_name_override", "localhost")]
request = rls_pb2.RateLimitRequest(domain="ops", descriptors=[
    ratelimit_pb2.RateLimitDescriptor(entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="user", value="tls")])])
with grpc.secure_channel(addr, creds, options=options) as channel:
    try:
        rls_pb2_grpc.RateLimitServiceStub(channel).ShouldRateLimit(request, timeout=3)
        print("ok")
    except grpc.RpcError as err:
        print(f"error {err.code().name}")
