"""The verify HTTP client against a tiny loopback http.server: errors must be one clear PpspecError."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from enginehelpers import free_port

from ppspec_cli.errors import PpspecError
from ppspec_cli.verify.client import Client, endpoint_from_host_port, normalize_endpoint

SECRET = "sk-test-9f8e7d6c5b4a"


class _Handler(BaseHTTPRequestHandler):
    routes: dict = {}
    seen_auth: list = []

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _route(self):
        _Handler.seen_auth.append(self.headers.get("Authorization"))
        fn = self.routes.get(self.path.split("?")[0])
        if fn is None:
            self.send_response(404)
            self.end_headers()
            return
        status, body, headers = fn(self)
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        data = body if isinstance(body, bytes) else body.encode()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = _route
    do_POST = _route


@pytest.fixture
def server():
    _Handler.routes = {}
    _Handler.seen_auth = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    t.start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_connection_refused_names_endpoint_and_suggests_serve():
    port = free_port()
    with pytest.raises(PpspecError) as ei:
        Client(f"http://127.0.0.1:{port}").health()
    e = ei.value
    assert f"127.0.0.1:{port}" in e.what
    assert "ppspec serve" in e.fix and "--endpoint" in e.fix
    assert e.exit_code == 1


def test_401_is_an_auth_error_without_the_key(server, monkeypatch):
    _, url = server
    _Handler.routes["/v1/models"] = lambda h: (
        401,
        json.dumps({"error": f"bad key {SECRET}"}),
        {"Content-Type": "application/json"},
    )
    monkeypatch.setenv("PPSPEC_TEST_KEY", SECRET)
    c = Client(url, api_key_env="PPSPEC_TEST_KEY")
    with pytest.raises(PpspecError) as ei:
        c.models()
    text = ei.value.render()
    assert "401" in text and "authentication" in text
    assert "PPSPEC_TEST_KEY" in text
    assert SECRET not in text
    assert SECRET not in repr(c)
    assert _Handler.seen_auth[-1] == f"Bearer {SECRET}"


def test_401_without_key_suggests_api_key_env(server):
    _, url = server
    _Handler.routes["/health"] = lambda h: (401, "", None)
    with pytest.raises(PpspecError) as ei:
        Client(url).health()
    assert "--api-key-env" in ei.value.fix


def test_server_error_detail_is_redacted(server, monkeypatch):
    _, url = server
    _Handler.routes["/v1/completions"] = lambda h: (500, f"boom: header was Bearer {SECRET}", None)
    monkeypatch.setenv("PPSPEC_TEST_KEY", SECRET)
    with pytest.raises(PpspecError) as ei:
        Client(url, api_key_env="PPSPEC_TEST_KEY").complete("m", "p", max_tokens=4)
    assert "HTTP 500" in ei.value.what and "boom" in ei.value.what
    assert SECRET not in ei.value.render()


def test_missing_api_key_variable_is_a_usage_error(monkeypatch):
    monkeypatch.delenv("PPSPEC_TEST_UNSET", raising=False)
    with pytest.raises(PpspecError) as ei:
        Client("http://127.0.0.1:1", api_key_env="PPSPEC_TEST_UNSET")
    assert "PPSPEC_TEST_UNSET" in ei.value.what and ei.value.exit_code == 2


def test_timeout(server):
    """The client gives up after its timeout while the server still holds the request: the handler
    answers only once the test releases it, so an answer can never arrive before the error."""
    _, url = server
    release, entered = threading.Event(), threading.Event()

    def stuck(h):
        entered.set()
        release.wait(60)
        return 200, "{}", None

    _Handler.routes["/v1/models"] = stuck
    result: list = []

    def call():
        try:
            Client(url, timeout=0.3)._json("GET", "/v1/models", timeout=0.3)
            result.append(None)
        except Exception as e:  # noqa: BLE001 - any other error fails the type check below
            result.append(e)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    try:
        caller.join(30)  # a generous bound against a hang, not a speed target
        assert not caller.is_alive(), (
            "the client ignored its 0.3 s timeout (still waiting while the server holds the request)"
        )
    finally:
        release.set()
    assert entered.is_set(), "the request never reached the server"
    assert isinstance(result[0], PpspecError), result
    assert "did not answer within 0.3 s" in result[0].what


def test_garbage_json(server):
    _, url = server
    _Handler.routes["/v1/models"] = lambda h: (200, "<html>not json</html>", None)
    with pytest.raises(PpspecError, match="is not valid JSON"):
        Client(url).models()


def test_json_without_data_list(server):
    _, url = server
    _Handler.routes["/v1/models"] = lambda h: (200, json.dumps({"object": "list"}), None)
    with pytest.raises(PpspecError, match="without a `data` list"):
        Client(url).models()


def test_completion_without_choices_carries_the_server_message(server):
    _, url = server
    _Handler.routes["/v1/completions"] = lambda h: (
        200,
        json.dumps({"error": {"message": "model nope not found"}}),
        None,
    )
    with pytest.raises(PpspecError, match="model nope not found"):
        Client(url).complete("nope", "hi", max_tokens=4)


def test_completion_request_is_greedy_and_parsed(server):
    _, url = server
    bodies = []

    def comp(h):
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        bodies.append(body)
        doc = {
            "model": body["model"],
            "choices": [{"text": "42", "finish_reason": "length"}],
            "usage": {"completion_tokens": 3, "prompt_tokens": 5},
        }
        return 200, json.dumps(doc), None

    _Handler.routes["/v1/completions"] = comp
    _Handler.routes["/v1/models"] = lambda h: (200, json.dumps({"data": [{"id": "tiny"}, {"id": "other"}]}), None)
    c = Client(url + "/v1/")  # a trailing /v1 is tolerated
    assert c.models() == ["tiny", "other"]
    out = c.complete("tiny", "Q", max_tokens=7, seed=3)
    assert (out.text, out.completion_tokens, out.prompt_tokens, out.finish_reason) == ("42", 3, 5, "length")
    assert bodies[0]["temperature"] == 0.0 and bodies[0]["max_tokens"] == 7 and bodies[0]["seed"] == 3
    assert bodies[0]["stream"] is False


def test_redirects_are_refused(server):
    _, url = server
    _Handler.routes["/metrics"] = lambda h: (302, "", {"Location": "http://example.invalid/metrics"})
    with pytest.raises(PpspecError, match="redirect"):
        Client(url).metrics()


def test_404_points_at_the_endpoint(server):
    _, url = server
    with pytest.raises(PpspecError) as ei:
        Client(url).metrics()
    assert "HTTP 404" in ei.value.what and "/metrics" in ei.value.where


def test_server_info_is_optional(server):
    _, url = server
    assert Client(url).server_info() is None  # 404 on a server without dev mode
    _Handler.routes["/server_info"] = lambda h: (200, json.dumps({"vllm_config": {"speculative_config": None}}), None)
    assert Client(url).server_info() == {"vllm_config": {"speculative_config": None}}


@pytest.mark.parametrize(
    "bad",
    [
        "ftp://127.0.0.1:8000",
        "file:///etc/passwd",
        "http://user:pw@127.0.0.1:8000",
        "http://127.0.0.1:8000/?x=1",
        "http://127.0.0.1:99999",
        "http://",
    ],
)
def test_only_plain_http_urls(bad):
    with pytest.raises(PpspecError) as ei:
        normalize_endpoint(bad)
    assert ei.value.where == "--endpoint"
    assert "pw" not in ei.value.render()


def test_endpoint_defaults_and_normalisation():
    assert normalize_endpoint(None) == "http://127.0.0.1:8000"
    assert normalize_endpoint("127.0.0.1:9000/") == "http://127.0.0.1:9000"
    assert normalize_endpoint("https://gw.example/prefix/v1") == "https://gw.example/prefix"
    assert endpoint_from_host_port("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert endpoint_from_host_port("::", 8001) == "http://[::1]:8001"
    assert endpoint_from_host_port("fe80::1", 8002) == "http://[fe80::1]:8002"
    assert endpoint_from_host_port("10.0.0.5", 80) == "http://10.0.0.5:80"
