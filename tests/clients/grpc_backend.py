"""gRPC backend for wayfinder's integration tests.

    python grpc_backend.py --name NAME [--port 0]

Serves one unary method, /wayfinder.test.Echo/Whoami, whose response is the UTF-8 bytes of
NAME whatever the request holds, so a client can tell which backend answered. Messages are
raw bytes (identity (de)serializers): no protobuf code generation is needed.

Binds 127.0.0.1:PORT (port 0: the OS chooses) with SO_REUSEPORT off, so a leftover process
can never silently share the port. Once serving, prints exactly one line to stdout,
`{"port": N}`, and flushes it: a harness reads that line instead of waiting a fixed time.

Stops cleanly (exit 0) on SIGTERM, on SIGINT, or when its stdin reaches end of file, so a
harness that dies (closing the pipe) does not leave it running. A harness must therefore
give it a pipe on stdin and keep the write end open for as long as the backend should run;
--no-stdin-watch turns that off for runs by hand with stdin at /dev/null.
"""

import argparse
import json
import os
import signal
import sys
import threading
from concurrent import futures

import grpc

SERVICE = "wayfinder.test.Echo"
METHOD = "Whoami"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="answer to every Whoami call")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument(
        "--no-stdin-watch", action="store_true", help="do not exit when stdin reaches end of file"
    )
    args = parser.parse_args()

    answer = args.name.encode("utf-8")

    def whoami(request: bytes, context: grpc.ServicerContext) -> bytes:
        return answer

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            METHOD: grpc.unary_unary_rpc_method_handler(
                whoami, request_deserializer=None, response_serializer=None
            )
        },
    )

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    # Installed before serving so that a signal sent right after the port line is handled.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.so_reuseport", 0)]
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    if port == 0:
        print(f"grpc_backend: cannot bind 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
        return 1
    server.start()

    if not args.no_stdin_watch:

        def watch_stdin():
            # Reads until EOF; whatever is written is ignored. Reads the raw fd, not
            # sys.stdin: a daemon thread blocked inside sys.stdin's buffered reader holds
            # its lock and makes interpreter shutdown abort.
            fd = sys.stdin.fileno()
            try:
                while os.read(fd, 65536):
                    pass
            except OSError:
                pass
            stop.set()

        threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()

    print(json.dumps({"port": port}), flush=True)

    stop.wait()
    server.stop(grace=None).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
