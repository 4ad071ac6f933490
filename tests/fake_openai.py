"""A stand-in OpenAI-compatible server for `ppspec bench --endpoint` tests: streamed and plain
completions whose tokens are a fixed function of the prompt, and a /metrics page with vLLM's
counter names (spec-decode counters when started with --spec: every request of N tokens adds N/2
drafts of 2 tokens, the first accepted). --diverge makes token 3 of the second prompt (in sorted
order) different, as a broken speculative server would.

    python tests/fake_openai.py PORT [--spec] [--diverge]
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SPEC = "--spec" in sys.argv
DIVERGE = "--diverge" in sys.argv
LOCK = threading.Lock()
COUNTS = {"gen": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0, "requests": 0}
SEEN: list[str] = []


def tokens(prompt, n: int) -> list[int]:
    key = json.dumps(prompt)
    h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
    out = [(h + 7 * i) % 1000 for i in range(n)]
    if DIVERGE and n > 3:
        with LOCK:
            if key not in SEEN:
                SEEN.append(key)
        if h % 2 == 1:  # about half of the prompts
            out[3] = (out[3] + 1) % 1000
    return out


def count(n: int) -> None:
    with LOCK:
        COUNTS["gen"] += n
        COUNTS["requests"] += 1
        if SPEC:
            COUNTS["drafts"] += n // 2
            COUNTS["draft_tokens"] += 2 * (n // 2)
            COUNTS["accepted"] += n // 2


def metrics() -> str:
    lab = 'engine="0",model_name="tiny-cpu-demo"'
    c = dict(COUNTS)
    lines = [
        "# TYPE vllm:generation_tokens counter",
        f"vllm:generation_tokens_total{{{lab}}} {float(c['gen'])}",
        "# TYPE vllm:request_success counter",
        f'vllm:request_success_total{{{lab},finished_reason="length"}} {float(c["requests"])}',
    ]
    if SPEC:
        for name, v in (
            ("num_drafts", c["drafts"]),
            ("num_draft_tokens", c["draft_tokens"]),
            ("num_accepted_tokens", c["accepted"]),
        ):
            lines += [f"# TYPE vllm:spec_decode_{name} counter", f"vllm:spec_decode_{name}_total{{{lab}}} {float(v)}"]
        lines += [
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="0"}} {float(c["accepted"])}',
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="1"}} 0.0',
        ]
    return "\n".join(lines) + "\n"


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "tiny-cpu-demo"}]}).encode())
        elif self.path == "/metrics":
            self._send(200, metrics().encode(), "text/plain; version=0.0.4")
        else:
            self._send(404, b"{}")

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(n) or b"{}")
        if self.path != "/v1/completions":
            self._send(404, b"{}")
            return
        toks = tokens(body.get("prompt"), int(body.get("max_tokens", 16)))
        if not body.get("stream"):
            count(len(toks))
            self._send(
                200,
                json.dumps(
                    {
                        "choices": [
                            {"text": "".join(f"t{t} " for t in toks), "finish_reason": "length", "token_ids": toks}
                        ],
                        "usage": {"completion_tokens": len(toks), "prompt_tokens": 4},
                    }
                ).encode(),
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for t in toks:
            self.wfile.write(f"data: {json.dumps({'choices': [{'text': f't{t} ', 'index': 0}]})}\n\n".encode())
            self.wfile.flush()
        count(len(toks))
        usage = {"completion_tokens": len(toks), "prompt_tokens": 4}
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


if __name__ == "__main__":
    srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
    srv.daemon_threads = True
    print("ready", flush=True)
    srv.serve_forever()
