"""A lone surrogate in a model id (a server may list one: JSON's "\\udcff") goes out escaped in the
request JSON, so the completion is sent and answered, never reported as "connection failed"."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Echo(BaseHTTPRequestHandler):
    seen: list[bytes] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        _Echo.seen.append(body)
        out = json.dumps(
            {"choices": [{"text": "ok", "finish_reason": "length"}], "usage": {"completion_tokens": 1}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


def test_lone_surrogate_model_id_is_sent_escaped():
    from ppspec_cli.verify.client import Client

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        c = Client(f"http://127.0.0.1:{srv.server_address[1]}")
        got = c.complete("model-\udcff", "hi", max_tokens=1, timeout=10.0)
    finally:
        srv.shutdown()
        srv.server_close()
    assert got.text == "ok"
    assert b"\\udcff" in _Echo.seen[-1] and json.loads(_Echo.seen[-1])["model"] == "model-\udcff"
