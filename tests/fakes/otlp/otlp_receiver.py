#!/usr/bin/env python3
"""An OTLP trace receiver for the tests: real OTLP in, the spans out as JSON for assertions.

It receives what an OpenTelemetry Collector's `otlp` receiver does, over both transports the
OTLP specification defines, and decodes it with the protocol's own generated messages
(`opentelemetry-proto` from PyPI):

- OTLP/HTTP: `POST /v1/traces` with `Content-Type: application/x-protobuf` (optionally
  `Content-Encoding: gzip`), decoded as `ExportTraceServiceRequest`; the answer is HTTP 200 with
  an encoded `ExportTraceServiceResponse` of the same content type. A body that does not
  decode is HTTP 400 with a `google.rpc.Status`, another content type HTTP 415, another path
  HTTP 404, as the specification says.
- OTLP/gRPC: the `opentelemetry.proto.collector.trace.v1.TraceService/Export` method (grpcio),
  answered with an `ExportTraceServiceResponse`.

Every span is kept with its resource's attributes, its scope, the transport it came over and
the request's headers (gRPC metadata), so tests can check the span tree of one task's calls
and what the exporter was configured with.

Query (JSON): `GET /spans?service=NAME` lists the spans whose resource has that
`service.name` (every span without it), oldest first:
  {"trace_id": hex, "span_id": hex, "parent_span_id": hex or "", "name", "kind" (SERVER,
   CLIENT, INTERNAL, ...), "attributes": {key: value}, "status": {"code": "UNSET"|"OK"|"ERROR",
   "message"}, "start_ns", "end_ns", "resource": {key: value}, "scope", "transport": "http" or
   "grpc", "headers": {name: value}}
`GET /healthz` answers "ok".

Shortcuts (the receiver is kinder or simpler than a collector):
- Traces only: `/v1/metrics` and `/v1/logs` and their gRPC services are not served.
- OTLP/JSON (`application/json`) is refused with 415; flowgate sends protobuf.
- No TLS, no authentication, no partial success (every span is accepted), no throttling
  (never 429 or RESOURCE_EXHAUSTED); spans are kept in memory for the life of the process.

Usage: otlp_receiver.py --port 0 --grpc-port 0; prints
`listening on http://127.0.0.1:HTTP_PORT grpc 127.0.0.1:GRPC_PORT` once both are up.
"""

import argparse
import gzip
import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

PROTOBUF = "application/x-protobuf"

LOCK = threading.Lock()
SPANS = []


def any_value(value):
    """An AnyValue as plain JSON."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def attributes(pairs):
    return {kv.key: any_value(kv.value) for kv in pairs}


def keep(request, transport, headers):
    """Stores every span of an ExportTraceServiceRequest."""
    kept = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                kept.append({
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": trace_pb2.Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                    "attributes": attributes(span.attributes),
                    "status": {
                        "code": trace_pb2.Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_"),
                        "message": span.status.message,
                    },
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "resource": resource,
                    "scope": scope_spans.scope.name,
                    "transport": transport,
                    "headers": headers,
                })
    with LOCK:
        SPANS.extend(kept)


class Http(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _status(self, http_status, code, message):
        # google.rpc.Status: code (1), message (2), encoded by hand (no googleapis dependency).
        encoded = message.encode()
        body = bytes([0x08, code, 0x12, len(encoded)]) + encoded if len(encoded) < 128 else b""
        self._answer(http_status, body, PROTOBUF)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/healthz":
            return self._answer(200, b"ok\n", "text/plain")
        if url.path != "/spans":
            return self._answer(404, b"not found\n", "text/plain")
        service = parse_qs(url.query).get("service", [None])[0]
        with LOCK:
            spans = [s for s in SPANS if service is None or s["resource"].get("service.name") == service]
        self._answer(200, json.dumps(spans).encode(), "application/json")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if urlparse(self.path).path != "/v1/traces":
            return self._answer(404, b"not found\n", "text/plain")
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type != PROTOBUF:
            return self._status(415, 3, "unsupported content type")
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            try:
                body = gzip.decompress(body)
            except OSError:
                return self._status(400, 3, "bad gzip body")
        request = trace_service_pb2.ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError:
            return self._status(400, 3, "not an ExportTraceServiceRequest")
        keep(request, "http", {k.lower(): v for k, v in self.headers.items()})
        self._answer(200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString(), PROTOBUF)


class Grpc(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        keep(request, "grpc", {k: v for k, v in context.invocation_metadata() if isinstance(v, str)})
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--grpc-port", type=int, default=0)
    args = parser.parse_args()
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Grpc(), grpc_server)
    grpc_port = grpc_server.add_insecure_port(f"127.0.0.1:{args.grpc_port}")
    grpc_server.start()
    http_server = ThreadingHTTPServer(("127.0.0.1", args.port), Http)
    http_server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{http_server.server_address[1]} grpc 127.0.0.1:{grpc_port}", flush=True)
    try:
        http_server.serve_forever()
    finally:
        grpc_server.stop(0)


if __name__ == "__main__":
    sys.exit(main())
