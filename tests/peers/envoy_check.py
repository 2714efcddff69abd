"""Validates Envoy configuration with a real Envoy (`envoy --mode validate`).

  bootstrap ENVOY FILE           validate a bootstrap file as it is
  envoyfilter ENVOY FILE         validate the Envoy payloads of Istio EnvoyFilter patches: each
                                 HTTP_FILTER, CLUSTER and VIRTUAL_HOST value is placed in a
                                 bootstrap where Envoy would put it, and the whole is validated
"""
import json
import subprocess
import sys
import tempfile

import yaml


def validate(envoy, path):
    out = subprocess.run([envoy, "--mode", "validate", "-c", path], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-3000:], file=sys.stderr)
        sys.exit(f"envoy rejected {path}")


def envoyfilter(envoy, path):
    http_filters, clusters, rate_limits = [], [], []
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for doc in docs:
        if doc.get("kind") != "EnvoyFilter":
            sys.exit(f"{path}: unexpected kind {doc.get('kind')}")
        for patch in doc["spec"]["configPatches"]:
            value = patch["patch"]["value"]
            kind = patch["applyTo"]
            if kind == "HTTP_FILTER":
                http_filters.append(value)
            elif kind == "CLUSTER":
                clusters.append(value)
            elif kind == "VIRTUAL_HOST":
                rate_limits.extend(value.get("rate_limits", []))
                extra = set(value) - {"rate_limits"}
                if extra:
                    sys.exit(f"{path}: VIRTUAL_HOST patch keys not checked: {extra}")
            else:
                sys.exit(f"{path}: applyTo {kind} not checked")
    router = {"name": "envoy.filters.http.router",
              "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "gateway",
        "route_config": {"virtual_hosts": [{"name": "*:80", "domains": ["*"], "rate_limits": rate_limits,
                                            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": clusters[0]["name"]}}]}]},
        "http_filters": http_filters + [router],
    }
    bootstrap = {"static_resources": {
        "listeners": [{"name": "gateway", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8080}},
                       "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                       "typed_config": hcm}]}]}],
        "clusters": clusters}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as out:
        json.dump(bootstrap, out)
    validate(envoy, out.name)
    print(f"{len(http_filters)} filters, {len(clusters)} clusters, {len(rate_limits)} rate limits ok")


if __name__ == "__main__":
    cmd, envoy, path = sys.argv[1:4]
    if cmd == "bootstrap":
        validate(envoy, path)
        print("ok")
    elif cmd == "envoyfilter":
        envoyfilter(envoy, path)
    else:
        sys.exit(f"unknown command {cmd}")
