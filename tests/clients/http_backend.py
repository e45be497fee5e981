"""HTTP/1.1 backend for wayfinder's integration tests (Python standard library only).

    python http_backend.py --name NAME [--port 0] [--fail-every N] [--delay-ms D]

Answers every request, whatever its method and path, with status 200 and the plain-text body
NAME, plus the headers `x-backend: NAME` and `x-path: <the request path>`, so a client can
tell which backend answered and what reached it, and `x-xfcc: <the request's
x-forwarded-client-cert>` when it has one (the client identity a sidecar's inbound vouches for). Responses carry `Content-Length` and the
server speaks HTTP/1.1, so connections are kept alive (as Envoy's connection pools expect).

--fail-every N: every Nth request, counting every request the process receives from 1,
answers 503 instead (same body and headers); N=2 fails every other request. --delay-ms D:
waits D milliseconds before answering each request.

Binds 127.0.0.1:PORT (port 0: the OS chooses) without SO_REUSEPORT, so a leftover process
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
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Server(ThreadingHTTPServer):
    # Handler threads must not keep the process alive once it is told to stop.
    daemon_threads = True
    # Envoy may open many connections at once; the default backlog of 5 would refuse some.
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A peer that went away (Envoy resetting a request after its timeout) is expected in
        # tests; anything else is printed with its traceback as usual.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def make_handler(name: str, fail_every: int, delay_ms: int):
    answer = name.encode("utf-8")
    lock = threading.Lock()
    count = 0

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_any(self) -> None:
            nonlocal count
            # Read (and ignore) a request body so the next request on the connection parses.
            length = int(self.headers.get("Content-Length") or 0)
            if length > 0:
                self.rfile.read(length)
            with lock:
                count += 1
                n = count
            if delay_ms > 0:
                time.sleep(delay_ms / 1000)
            status = 503 if fail_every > 0 and n % fail_every == 0 else 200
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(answer)))
            self.send_header("x-backend", name)
            self.send_header("x-path", self.path)
            xfcc = self.headers.get("x-forwarded-client-cert")
            if xfcc is not None:
                self.send_header("x-xfcc", xfcc)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = handle_any

        def log_message(self, format, *args):  # noqa: A002 (the base class's name)
            # Quiet: thousands of requests per test would flood the test output.
            pass

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="body of every answer, and x-backend")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument(
        "--fail-every", type=int, default=0, metavar="N", help="answer 503 to every Nth request"
    )
    parser.add_argument(
        "--delay-ms", type=int, default=0, metavar="D", help="wait D ms before each answer"
    )
    parser.add_argument(
        "--no-stdin-watch", action="store_true", help="do not exit when stdin reaches end of file"
    )
    args = parser.parse_args()
    if args.fail_every < 0 or args.delay_ms < 0:
        parser.error("--fail-every and --delay-ms must not be negative")

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    # Installed before serving so that a signal sent right after the port line is handled.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        handler = make_handler(args.name, args.fail_every, args.delay_ms)
        server = Server(("127.0.0.1", args.port), handler)
    except OSError as e:
        print(f"http_backend: cannot bind 127.0.0.1:{args.port}: {e}", file=sys.stderr, flush=True)
        return 1
    port = server.server_address[1]
    serving = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="serve", daemon=True
    )
    serving.start()

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
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
