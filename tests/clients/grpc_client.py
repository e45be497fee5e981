"""Long-lived gRPC client for wayfinder's integration tests, driven over stdin/stdout.

    python grpc_client.py --target xds:///echo.default.svc.cluster.local:7070 \\
        --xds-server 127.0.0.1:PORT --node-id ID [--namespace default]
    python grpc_client.py --target 127.0.0.1:PORT        # plain channel, no xDS

With an xds: target the client builds an xDS bootstrap (one ADS server, insecure, v3) and
hands it to gRPC through GRPC_XDS_BOOTSTRAP_CONFIG, set before grpc is imported. It opens
one channel and keeps it (and so its xDS subscription) for its whole life; a test decides
when calls are made by writing commands, one per line, on stdin:

    call N [TIMEOUT_S] [KEY=VALUE ...]
                         N unary calls to /wayfinder.test.Echo/Whoami, one after another,
                         each with a deadline of TIMEOUT_S seconds (default 5) and the
                         metadata KEY: VALUE (every pair; KEY is lowercased and must then be
                         made of a-z, 0-9, '-', '_' and '.', not ending in -bin; VALUE is
                         everything after the first '=', printable ASCII, possibly empty);
                         prints one line:
                         {"ok": {"NAME": count, ...}, "errors": {"CODE": count, ...},
                         "last_error": "details" | null}
                         (NAME: the answering backend's name; CODE: a grpc.StatusCode name
                         such as UNAVAILABLE)
    quit                 exits 0 (so does end of file on stdin)

Every command gets exactly one JSON line on stdout, flushed; a line it cannot parse gets
{"error": "..."}. Nothing else is written to stdout (gRPC's own logs go to stderr).
"""

import argparse
import json
import os
import re
import sys

SERVICE_METHOD = "/wayfinder.test.Echo/Whoami"
DEFAULT_TIMEOUT_S = 5.0
USAGE = "call N [TIMEOUT_S] [KEY=VALUE ...] | quit"
METADATA_KEY = re.compile(r"[0-9a-z_.-]+")
METADATA_VALUE = re.compile(r"[!-~]*")  # printable ASCII (no spaces: words split on them)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="xds:///NAME[:PORT] or HOST:PORT")
    parser.add_argument("--xds-server", help="ADS server HOST:PORT (required for xds: targets)")
    parser.add_argument("--node-id", help="xDS node id (required for xds: targets)")
    parser.add_argument("--namespace", default="default", help="node metadata NAMESPACE")
    args = parser.parse_args()
    if args.target.startswith("xds:") and not (args.xds_server and args.node_id):
        parser.error("an xds: target needs --xds-server and --node-id")
    return args


def bootstrap(xds_server: str, node_id: str, namespace: str) -> str:
    return json.dumps(
        {
            "xds_servers": [
                {
                    "server_uri": xds_server,
                    "channel_creds": [{"type": "insecure"}],
                    "server_features": ["xds_v3"],
                }
            ],
            "node": {
                "id": node_id,
                "metadata": {"NAMESPACE": namespace, "GENERATOR": "grpc"},
            },
        }
    )


def parse_call(words: list) -> tuple:
    """(n, timeout, metadata) of `call N [TIMEOUT_S] [KEY=VALUE ...]`'s words after `call`;
    raises ValueError when they are malformed."""
    if not words:
        raise ValueError
    n = int(words[0])
    rest = words[1:]
    timeout = DEFAULT_TIMEOUT_S
    if rest and "=" not in rest[0]:
        timeout = float(rest[0])
        rest = rest[1:]
    if n < 0 or not timeout > 0:
        raise ValueError
    metadata = []
    for pair in rest:
        key, sep, value = pair.partition("=")
        key = key.lower()
        if not (sep and METADATA_KEY.fullmatch(key) and METADATA_VALUE.fullmatch(value)):
            raise ValueError
        if key.endswith("-bin"):  # binary metadata: its value would have to be bytes
            raise ValueError
        metadata.append((key, value))
    return n, timeout, tuple(metadata)


def emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    args = parse_args()
    if args.xds_server and args.node_id:
        # Read by gRPC C-core when the first xds: channel is resolved; set before the
        # import so no part of grpc can have looked at the environment yet.
        os.environ["GRPC_XDS_BOOTSTRAP_CONFIG"] = bootstrap(
            args.xds_server, args.node_id, args.namespace
        )
        os.environ.pop("GRPC_XDS_BOOTSTRAP", None)  # it would take precedence

    import grpc  # noqa: E402 (after the environment is set)

    channel = grpc.insecure_channel(args.target)
    whoami = channel.unary_unary(
        SERVICE_METHOD, request_serializer=None, response_deserializer=None
    )

    def call(n: int, timeout: float, metadata: tuple) -> dict:
        ok: dict = {}
        errors: dict = {}
        last_error = None
        for _ in range(n):
            try:
                name = whoami(b"", timeout=timeout, metadata=metadata).decode("utf-8", "replace")
                ok[name] = ok.get(name, 0) + 1
            except grpc.RpcError as e:
                code = e.code().name if e.code() is not None else "UNKNOWN"
                errors[code] = errors.get(code, 0) + 1
                last_error = e.details() or code
        return {"ok": ok, "errors": errors, "last_error": last_error}

    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "quit" and len(words) == 1:
                break
            if words[0] == "call" and len(words) >= 2:
                try:
                    n, timeout, metadata = parse_call(words[1:])
                except ValueError:
                    emit({"error": f"bad arguments: {line.strip()!r}"})
                    continue
                emit(call(n, timeout, metadata))
                continue
            emit({"error": f"unknown command: {line.strip()!r} (expected: {USAGE})"})
    except KeyboardInterrupt:
        pass
    finally:
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
