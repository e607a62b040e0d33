#!/usr/bin/env python3
"""An OTLP/HTTP sink for the telemetry benchmark: takes each export at /v1/traces and answers
200 with an empty ExportTraceServiceResponse (zero bytes of protobuf), counting what it took.

    python3 scripts/bench/otlp_sink.py PORT

It does not decode the spans (tests/fakes/otlp does, for the tests): on a 2-core machine a
decoding collector would compete with flowgate for the CPU and the benchmark would measure it.
GET /count answers "<exports> <bytes>".
"""
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
exports = 0
received = 0


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global exports, received
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        with lock:
            exports += 1
            received += length
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        body = f"{exports} {received}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
