#!/usr/bin/env python3
"""A misbehaving OpenAI-compatible server for scripts/hostile.sh (issue 41): one way of misbehaving per
process. Plain Python (http.server), no dependencies.

    python3 scripts/hostile_server.py PORT MODE

MODE:
  inflate        streams one short chunk per request and claims 4,294,967,295 completion tokens in usage
  inflate-ask    streams one one-byte chunk and claims max_tokens completion tokens in usage
  endless-models answers /v1/models with a body that never ends
  many-models    lists 200,000 models, none of them the one asked for
  crlf           frames its server-sent events with "\\n\\r\\n" (valid), one token per chunk
  gzip           compresses its stream (Content-Encoding: gzip), which a client must name, not misread
  stall          lists the model, then never answers a completion
"""
import time
import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = sys.argv[2] if len(sys.argv) > 2 else "inflate"
MODEL = "m"


def chunk(text, usage=None, finish=None):
    c = {"id": "x", "object": "text_completion", "model": MODEL,
         "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if usage is not None:
        c["usage"] = usage
    return c


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, code, body, kind="application/json", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if not self.path.startswith("/v1/models"):
            return self.send(200 if self.path == "/health" else 404, b"{}")
        if MODE == "endless-models":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"data": [')
            try:
                while True:
                    self.wfile.write(b'{"id": "padding-model-name"}, ' * 1000)
            except (BrokenPipeError, ConnectionResetError):
                return
        names = [f"model-{i}" for i in range(200_000)] if MODE == "many-models" else [MODEL]
        self.send(200, json.dumps({"object": "list", "data": [{"id": n} for n in names]}).encode())

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        if MODE == "stall":
            time.sleep(3600)
        max_tokens = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        prompt = req.get("prompt") or []
        usage = {"prompt_tokens": len(prompt) if isinstance(prompt, list) else 1}
        sep = "\n\r\n" if MODE == "crlf" else "\n\n"
        if MODE.startswith("inflate"):
            claim = 4_294_967_295 if MODE == "inflate" else max_tokens
            events = [chunk("a"), chunk("", dict(usage, completion_tokens=claim), "length")]
        else:
            events = [chunk(f"w{i} ") for i in range(max_tokens)]
            events.append(chunk("", dict(usage, completion_tokens=max_tokens), "length"))
        body = "".join(f"data: {json.dumps(e)}{sep}" for e in events) + f"data: [DONE]{sep}"
        raw = body.encode()
        extra = []
        if MODE == "gzip":
            raw = gzip.compress(raw)
            extra = [("Content-Encoding", "gzip")]
        self.send(200, raw, "text/event-stream", extra)


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
