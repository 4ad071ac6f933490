"""Attacker round 2 (issue 23): cases GENERATED per mechanism, each a call that returns None (the
mechanism held) or a one-line problem. Run in process; no network beyond loopback servers made here.

Mechanisms and their classes (every X x every Y):
- terminal: every terminal channel x every control class (C0, DEL, C1, CSI, OSC 52, OSC 8, bidi,
  zero-width, lone surrogate, line separators, rich markup, emoji codes, length);
- writers: every writer x every kind of target (missing, regular, directory, symlink, dangling
  symlink, FIFO, UNIX socket, character device made with mknod, a path too long);
- network: every remote read x every hostile server behaviour (drip, huge body, close mid-body,
  not HTTP, redirect, headers forever);
- engine-options: every refused option x every spelling vLLM's parser accepts for it (`_`/`-`,
  leading `--`, every unambiguous prefix length, `no-` forms, dotted sub-keys), every
  VLLM_PLUGINS spelling (read as vLLM splits it);
- untrusted: every code/path/endpoint option and env entry x every spelling, acknowledged or not;
- persisted: every persisted file x every field x every wrong type (string, bool, null, list,
  object, 1e999, -1e999, NaN text, 10**400) plus file kinds (FIFO, directory, symlink, empty, not
  JSON, an array), and the gates on every accepted baseline/reference (never a crash after a run);
- run-dir: every RunDir operation x every swap (run dir replaced by a symlink, entry a symlink /
  FIFO / directory);
- validation: every command-line value check x hostile values (non-ASCII digits, trailing newline,
  empty, option-like, control characters).

`all_cases()` yields (mechanism, class, name, fn). tests/attack/test_suite.py runs them; `python -m
tests.attack.run` prints the counts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

Case = tuple[str, str, str, Callable[[], "str | None"]]

# ---------------------------------------------------------------------------------------------
# terminal

_C0 = [chr(c) for c in range(0x20) if chr(c) not in "\n\t"]
CONTROL_CLASSES: dict[str, list[str]] = {
    "c0": _C0,
    "del": ["\x7f"],
    "c1": [chr(c) for c in range(0x80, 0xA0)],
    "csi": ["\x1b[2J\x1b[H", "\x1b[31mred\x1b[0m", "\x9b31m"],
    "osc52": ["\x1b]52;c;ZWNobyBwd25lZA==\x07", "\x1b]52;c;ZWNobyBwd25lZA==\x1b\\"],
    "osc8": ["\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"],
    "bidi": [
        "\u202a",
        "\u202b",
        "\u202c",
        "\u202d",
        "\u202e",
        "\u2066",
        "\u2067",
        "\u2068",
        "\u2069",
        "\u200e",
        "\u200f",
        "\u061c",
    ],
    "zero-width": ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e"],
    "surrogate": ["\ud800", "\udcff", "\udfff"],
    "separators": ["\u2028", "\u2029", "\x85"],
    "markup": ["[/bold]", "[/]", "[bold red]x", "[link=file:///etc/passwd]x[/link]", "[/INST]"],
    "emoji": [":thumbs_up:", ":smile:"],
    "length": ["A" * 200_000],
}
_RAW_BAD = {"c0", "del", "c1", "csi", "osc52", "osc8", "bidi", "zero-width", "surrogate", "separators"}


def _payload(piece: str) -> str:
    return f"m{piece}x"


def _bad_chars(piece: str) -> set[str]:
    import unicodedata

    return {ch for ch in piece if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")}


@contextlib.contextmanager
def _captured():
    """sys.stdout / sys.stderr as in `ppspec` (terminal.install) over byte buffers; yields a
    function returning everything written, decoded."""
    from ppspec_cli.io import terminal

    out_b, err_b = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_b, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_b, encoding="utf-8", errors="strict", write_through=True)
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        terminal.install()

        def text() -> str:
            sys.stdout.flush()
            sys.stderr.flush()
            return out_b.getvalue().decode("utf-8", "strict") + err_b.getvalue().decode("utf-8", "strict")

        yield text
    finally:
        sys.stdout, sys.stderr = old


def _channel_error(p: str) -> None:
    from ppspec_cli.commands.common import err_console as _err_console
    from ppspec_cli.errors import PpspecError

    _err_console().print(PpspecError(p, where=p, fix=p).render())


def _channel_progress(p: str) -> None:
    from ppspec_cli.commands.common import progress as _progress

    _progress(p)


def _channel_engine_log(p: str) -> None:  # the pump's write (supervise.pump)
    sys.stderr.write(p + "\n")
    sys.stderr.flush()


def _channel_serve_warning(p: str) -> None:  # supervise's default log line
    print(f"ppspec: {p}", file=sys.stderr, flush=True)


def _channel_findings(p: str) -> None:
    from ppspec_cli.commands.render import render_findings
    from ppspec_cli.findings import Code
    from ppspec_cli.io import terminal

    render_findings(terminal.console(), [Code(p[:60], ("error",), p, p).at(p, p, fix=p)])


def _channel_verify_table(p: str) -> None:
    from ppspec_cli.io import terminal
    from ppspec_cli.verify.report import render_table

    r = {
        "endpoint": p,
        "model": p,
        "prompt_set": {"name": p, "version": 1, "sha256": p},
        "settings": {},
        "spec_decode": {"configured": False},
        "throughput": {},
        "warnings": [p],
        "gates": [{"name": p, "status": p, "detail": p}],
    }
    render_table(r, terminal.console())


def _channel_verify_progress(p: str) -> None:
    from ppspec_cli.verify.runner import _stderr_progress

    _stderr_progress(p)


def _channel_table_cell(p: str) -> None:
    from rich.table import Table

    from ppspec_cli.io import terminal

    t = Table()
    t.add_column(p)
    t.add_row(p)
    terminal.console().print(t)


def _channel_styled(p: str) -> None:
    from ppspec_cli.io import terminal

    terminal.console().print(terminal.styled("[bold]{}[/bold] {}", p, p))


def _channel_adapters_show(p: str) -> None:
    """`adapters show` of a pack whose manifest text is hostile (description, notes, vLLM range)."""
    from ppspec_cli.commands import adapters
    from ppspec_cli.knowledge import packs, packstatus

    real = packs.load_packs()[0]
    fake = real.__class__.__new__(real.__class__)
    fake.__dict__.update(real.__dict__)
    object.__setattr__(fake, "description", p) if hasattr(fake, "__dataclass_fields__") else None
    old_get, old_rec = adapters.get_pack, packstatus.pack_record
    adapters.get_pack = lambda name: fake
    packstatus.pack_record = lambda pack, installed, errs, anchors=None: {
        **old_rec(real, installed, errs, anchors),
        "status_detail": p,
    }
    try:
        adapters.adapters_show(real.name, False)
    finally:
        adapters.get_pack, packstatus.pack_record = old_get, old_rec


def _channel_json(p: str) -> str | None:
    """--json output stays exact: what is printed parses back to the same text."""
    from ppspec_cli.errors import PpspecError

    e = PpspecError(p[:3000])
    with _captured() as text:
        print(json.dumps({"ok": False, **e.to_json()}, indent=2))
        got = text()
    back = json.loads(got)["error"]
    return None if back == p[:3000] else f"JSON changed: {back[:40]!r} != {p[:40]!r}"


TERMINAL_CHANNELS: dict[str, Callable[[str], None]] = {
    "error-rendering": _channel_error,
    "progress-line": _channel_progress,
    "engine-log-pump": _channel_engine_log,
    "serve-warning": _channel_serve_warning,
    "check-findings": _channel_findings,
    "verify-table": _channel_verify_table,
    "verify-progress": _channel_verify_progress,
    "table-cell": _channel_table_cell,
    "styled-value": _channel_styled,
    "adapters-show": _channel_adapters_show,
}


def _terminal_case(channel: Callable[[str], None], cls: str, piece: str) -> Callable[[], str | None]:
    def run() -> str | None:
        p = _payload(piece)
        try:
            with _captured() as text:
                channel(p)
                got = text()
        except Exception as e:  # noqa: BLE001 - the finding is the crash
            return f"crashed: {type(e).__name__}: {str(e)[:80]}"
        raw = [hex(ord(c)) for c in _bad_chars(piece) if c in got]
        if cls in _RAW_BAD and raw:
            return f"raw {raw[:3]} reached the terminal"
        if cls == "markup" and piece not in got.replace("\n", ""):
            return f"markup {piece!r} was interpreted, not shown"
        if cls == "emoji" and piece not in got:
            return f"emoji code {piece!r} was replaced"
        if (
            cls == "length"
            and len(got) > 60_000
            and channel
            not in (
                _channel_findings,
                _channel_table_cell,
                _channel_styled,
                _channel_verify_table,
                _channel_adapters_show,
            )
        ):
            return f"{len(got)} characters reached the terminal for one message"
        return None

    return run


def _json_case(p: str) -> Callable[[], str | None]:
    return lambda: _channel_json(p)


def terminal_cases() -> Iterator[Case]:
    for cname, ch in TERMINAL_CHANNELS.items():
        for cls, pieces in CONTROL_CLASSES.items():
            for piece in pieces:
                yield ("terminal", cls, f"{cname}:{piece[:12]!r}", _terminal_case(ch, cls, piece))
    for cls, pieces in CONTROL_CLASSES.items():
        for piece in pieces:
            yield ("terminal", "json-exact", f"json:{cls}:{piece[:12]!r}", _json_case(_payload(piece)))


# ---------------------------------------------------------------------------------------------
# writers


def _make_target(d: Path, kind: str) -> Path:
    p = d / "out.json"
    if kind == "missing":
        pass
    elif kind == "regular":
        p.write_text("old\n")
    elif kind == "directory":
        p.mkdir()
    elif kind == "symlink":
        (d / "elsewhere").write_text("precious\n")
        p.symlink_to(d / "elsewhere")
    elif kind == "dangling-symlink":
        p.symlink_to(d / "nowhere")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()
    elif kind == "char-device":
        os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # a private /dev/null twin, never the machine's
    elif kind == "too-long":
        p = d / ("x" * 300)
    return p


WRITE_TARGETS = [
    "missing",
    "regular",
    "directory",
    "symlink",
    "dangling-symlink",
    "fifo",
    "socket",
    "char-device",
    "too-long",
]


def _writers() -> dict[str, Callable[[Path], None]]:
    from ppspec_cli.io import safeio
    from ppspec_cli.running.planfile import write_plan_file
    from ppspec_cli.running.serve.rundir import RunDir
    from ppspec_cli.verify.report import Report, save_report

    def report(p: Path) -> None:
        save_report(Report("http://x", "m", {}, {}, {}, {}, {}, {}, []), p)

    def plan(p: Path) -> None:
        write_plan_file(p, {"profile": "x", "pack": None, "plan": None, "expect": {}})

    def rundir(p: Path) -> None:
        with RunDir.open(p.parent, create=False) as rd:
            rd.write_text(p.name, "x\n", what="run file")

    def docs(p: Path) -> None:
        from ppspec_cli.commands import docs as docs_cmd

        docs_cmd.run(str(p))

    return {
        "safeio.write_text": lambda p: safeio.write_text(p, "x\n", what="t"),
        "verify --out/--save-*": report,
        "plan file": plan,
        "run dir": rundir,
        "docs --out": docs,
    }


#: Writers of a path the user names (`--out`, `--save-*`): a character device or FIFO there is
#: written THROUGH (issue 32: `--out /dev/null` must work), never replaced. The others (ppspec's own
#: files) refuse it.
THROUGH_WRITERS = ("verify --out/--save-*", "docs --out")


def _fifo_reader(p: Path) -> tuple[threading.Thread, list[bytes]]:
    """A reader at the FIFO `p` (as `cat p` would be): what was written through it lands in the list."""
    got: list[bytes] = []

    def read() -> None:
        with open(p, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, got


def _writer_case(wname: str, kind: str) -> Callable[[], str | None]:
    def run() -> str | None:  # noqa: C901, PLR0911, PLR0912
        from ppspec_cli.errors import PpspecError

        if kind == "char-device" and os.geteuid() != 0:
            return None  # mknod needs root; CI runs as root (the class is covered there)
        with tempfile.TemporaryDirectory() as td:
            d = Path(td)
            try:
                p = _make_target(d, kind)
            except OSError as e:
                return f"could not build target: {e}"
            before = os.lstat(p).st_mode if os.path.lexists(p) else None
            through = wname in THROUGH_WRITERS and kind in ("fifo", "char-device")
            reader = _fifo_reader(p) if through and kind == "fifo" else None
            try:
                _writers()[wname](p)
                ok = True
            except PpspecError as e:
                ok = False
                if e.exit_code not in (1, 2):
                    return f"exit code {e.exit_code}"
            except Exception as e:  # noqa: BLE001
                return f"crashed: {type(e).__name__}: {str(e)[:80]}"
            after = os.lstat(p).st_mode if os.path.lexists(p) else None
            if through and not ok:
                return f"refused to write through a {kind} the user named"
            if reader is not None:
                reader[0].join(10)  # the writer closed the FIFO: the reader has its EOF
                if not reader[1] or not reader[1][0]:
                    return "wrote nothing through the FIFO"
            if kind in ("missing", "regular", "dangling-symlink") and kind != "dangling-symlink" and not ok:
                return "refused a writable target"
            if kind not in ("missing", "regular", "too-long") and (
                before is None or after is None or stat.S_IFMT(before) != stat.S_IFMT(after)
            ):
                return f"replaced a {kind}"
            if kind == "symlink" and (d / "elsewhere").read_text() != "precious\n":
                return "wrote through a symlink"
            left = [n for n in os.listdir(d) if n.endswith(".ppspec-tmp")]
            if left:
                return f"left {left[0]}"
        return None

    return run


def writer_cases() -> Iterator[Case]:
    for w in _writers():
        for k in WRITE_TARGETS:
            yield ("writers", k, f"{w} -> {k}", _writer_case(w, k))


# ---------------------------------------------------------------------------------------------
# network


class HostileServer:
    """A loopback TCP server that answers every connection with one behaviour."""

    def __init__(self, behaviour: str):
        self.behaviour = behaviour
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(c,), daemon=True).start()

    def _answer(self, c: socket.socket) -> None:
        try:
            c.settimeout(5)
            c.recv(65536)
            b = self.behaviour
            if b == "drip":
                for ch in b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000:
                    if self._stop.is_set():
                        break
                    c.sendall(bytes([ch]))
                    time.sleep(0.05)
            elif b == "huge":
                c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                chunk = b"%x\r\n%s\r\n" % (1 << 16, b"7" * (1 << 16))
                while not self._stop.is_set():
                    c.sendall(chunk)
            elif b == "close-mid-body":
                c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{"data": [')
            elif b == "not-http":
                c.sendall(b"SSH-2.0-OpenSSH_9.0\r\n" * 10)
            elif b == "redirect":
                c.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://evil.example/\r\nContent-Length: 0\r\n\r\n")
            elif b == "headers-forever":
                c.sendall(b"HTTP/1.1 200 OK\r\n")
                while not self._stop.is_set():
                    c.sendall(b"X-A: " + b"a" * 1000 + b"\r\n")
                    time.sleep(0.001)
        except OSError:
            pass
        finally:
            c.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


NET_BEHAVIOURS = ["drip", "huge", "close-mid-body", "not-http", "redirect", "headers-forever"]


def _remote_reads() -> dict[str, Callable[[int], None]]:
    def client(port: int):
        from ppspec_cli.verify.client import Client

        c = Client(f"http://127.0.0.1:{port}")
        c.timeout = 1.0
        return c

    def metrics(port: int) -> None:
        c = client(port)
        c._request("GET", "/metrics", limit=1 << 20, timeout=1.0)  # noqa: SLF001 - the scrape's own exchange

    def hub(port: int) -> None:
        from ppspec_cli.checkpoint import reader

        os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{port}"
        os.environ["PPSPEC_HUB_DEADLINE"] = "1"
        try:
            from huggingface_hub import constants

            old = constants.ENDPOINT
            constants.ENDPOINT = os.environ["HF_ENDPOINT"]
            reader._REACHABILITY.clear()  # noqa: SLF001
            try:
                reader.load_hub("org/model", None)
            finally:
                constants.ENDPOINT = old
        finally:
            os.environ.pop("HF_ENDPOINT", None)
            os.environ.pop("PPSPEC_HUB_DEADLINE", None)

    return {
        "health": lambda port: client(port).health(timeout=1.0),
        "models": lambda port: client(port).models(timeout=1.0),
        "metrics": metrics,
        "completion": lambda port: client(port).complete("m", "hi", max_tokens=1, timeout=1.0),
        "hub-metadata": hub,
    }


def _net_case(rname: str, behaviour: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError

        srv = HostileServer(behaviour)
        try:
            _remote_reads()[rname](srv.port)
            if rname == "hub-metadata":
                return None  # the hub path may turn a dead hub into gaps (metadata unknown): no hang, no crash
            return "accepted a hostile answer"
        except PpspecError as e:
            if len(e.render()) > 6000:
                return f"a {len(e.render())}-character message"
            return None
        except Exception as e:  # noqa: BLE001
            return f"crashed: {type(e).__name__}: {str(e)[:80]}"
        finally:
            srv.close()

    return run


def network_cases() -> Iterator[Case]:
    for r in _remote_reads():
        for b in NET_BEHAVIOURS:
            yield ("network", b, f"{r} x {b}", _net_case(r, b))


# ---------------------------------------------------------------------------------------------
# engine options: what vLLM's parser accepts, mirrored with plain argparse over vLLM 0.32's options


def mirror_parser() -> argparse.ArgumentParser:
    """argparse (allow_abbrev, as vLLM's FlexibleArgumentParser) over the snapshot of vLLM's options."""
    from ppspec_cli.planning.engine_options import vllm_option_strings

    p = argparse.ArgumentParser(allow_abbrev=True, add_help=False, exit_on_error=False)
    for o in sorted(vllm_option_strings()):
        p.add_argument(f"--{o}", dest=o.replace("-", "_"), nargs="?", const=True)
    return p


def vllm_reads(key: str) -> str | None:
    """The vLLM option a `--KEY value` resolves to, as vLLM reads it (its `_`->`-` rewrite up to the
    first `.`, its dotted-key folding, then argparse); None when vLLM would refuse it."""
    head, dot, _tail = key.partition(".")
    arg = "--" + head.lstrip("-").replace("_", "-")
    try:
        ns, rest = mirror_parser().parse_known_args([arg, "1"])
    except (argparse.ArgumentError, SystemExit):
        return None
    if rest and rest != ["1"]:
        return None
    set_ = [k for k, v in vars(ns).items() if v is not None]
    return set_[0].replace("_", "-") if len(set_) == 1 else None


def spellings(flag: str, boolean: bool) -> Iterator[str]:
    """Every spelling of `flag` an `engine:` key can take that vLLM reads as `flag`."""
    from ppspec_cli.planning.engine_options import vllm_option_strings

    opts = vllm_option_strings()
    forms = {
        flag,
        flag.replace("-", "_"),
        f"--{flag}",
        f"--{flag.replace('-', '_')}",
        f"{flag}.sub_field",
        f"{flag.replace('-', '_')}.a.b_c",
    }
    for n in range(1, len(flag)):
        pre = flag[:n]
        if pre.endswith("-"):
            continue
        if [o for o in opts if o.startswith(pre)] == [flag]:
            forms.add(pre)
            forms.add(pre.replace("-", "_"))
    if boolean and f"no-{flag}" in opts:
        forms.add(f"no-{flag}")
        forms.add(f"no_{flag.replace('-', '_')}")
    return iter(sorted(forms))


def _refused_case(key: str, flag: str, code_set: set[str]) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.planning.engine_options import launch_refusals

        target = vllm_reads(key)
        if target is None:
            return None  # vLLM itself refuses the spelling: not a bypass
        got = {f.code for f in launch_refusals({key: "x"}, {})}
        if not got & code_set:
            return f"vLLM reads {key!r} as --{target}, ppspec passed it ({sorted(got)})"
        return None

    return run


def engine_option_cases() -> Iterator[Case]:
    from ppspec_cli.knowledge.options import MANAGED_FLAGS, REFUSED_FLAGS, vllm_option_strings

    opts = vllm_option_strings()
    for flag in sorted(MANAGED_FLAGS):
        if flag not in opts:
            continue
        for s in spellings(flag, True):
            yield (
                "engine-options",
                "managed",
                f"{flag} as {s!r}",
                _refused_case(
                    s,
                    flag,
                    {
                        "engine-managed-option",
                        "engine-bad-option-name",
                        "engine-ambiguous-option",
                        "engine-secret-option",
                    },
                ),
            )
    for flag in sorted(REFUSED_FLAGS):
        for s in spellings(flag, False):
            yield (
                "engine-options",
                "refused",
                f"{flag} as {s!r}",
                _refused_case(s, flag, {"engine-refused-option", "engine-ambiguous-option", "engine-bad-option-name"}),
            )

    def depth(key: str) -> Callable[[], str | None]:
        def run() -> str | None:
            from ppspec_cli.planning.engine_options import launch_refusals

            got = {f.code for f in launch_refusals({key: 2}, {})}
            return None if "engine-overrides-depth" in got else f"{key} passed"

        return run

    for key in (
        "hf-overrides.num_hidden_layers",
        "hf_overrides.num_hidden_layers",
        "hf-over.num_hidden_layers",
        "hf_overrides.text_config.num_hidden_layers",
        "--hf-overrides.num_nextn_predict_layers",
    ):
        yield ("engine-options", "dotted-depth", key, depth(key))

    def argv(key: str, want: str) -> Callable[[], str | None]:
        def run() -> str | None:
            from ppspec_cli.planning.engine_options import read_options
            from ppspec_cli.running.launch import engine_args

            got = engine_args(read_options({key: 1}))[0]
            return None if got == want else f"{key} passed to vLLM as {got}"

        return run

    for key, want in (
        ("hf_overrides.rope_theta", "--hf-overrides.rope_theta"),
        ("compilation_config.cudagraph_mode", "--compilation-config.cudagraph_mode"),
        ("max_model", "--max-model-len"),
    ):
        yield ("engine-options", "sub-key-spelling", key, argv(key, want))

    def plugins(val: str) -> Callable[[], str | None]:
        def run() -> str | None:
            from ppspec_cli.planning.engine_options import launch_refusals

            loads = "ppspec" in val.split(",")  # vllm/envs.py: os.environ["VLLM_PLUGINS"].split(",")
            refused = any(f.code == "env-plugins-skip-ppspec" for f in launch_refusals({}, {"VLLM_PLUGINS": val}))
            return (
                None
                if refused != loads
                else f"VLLM_PLUGINS={val!r}: vLLM {'loads' if loads else 'skips'} ppspec, check "
                f"{'refused' if refused else 'passed'}"
            )

        return run

    for val in (
        "ppspec",
        " ppspec",
        "ppspec ",
        "other, ppspec",
        "other,ppspec",
        "PPSPEC",
        "ppspec,",
        ",ppspec",
        "",
        "ppspec\n",
        "pp spec",
    ):
        yield ("engine-options", "plugins-spelling", repr(val), plugins(val))


# ---------------------------------------------------------------------------------------------
# untrusted profiles


def untrusted_cases() -> Iterator[Case]:
    from ppspec_cli.knowledge.options import UNTRUSTED_ENV, UNTRUSTED_OPTIONS, UNTRUSTED_SUBKEYS, vllm_option_strings
    from ppspec_cli.planning.engine_options import launch_refusals

    opts = vllm_option_strings()

    def opt_case(key: str, value: object, ack: list[str] | None) -> Callable[[], str | None]:
        def run() -> str | None:
            got = {f.code for f in launch_refusals({key: value}, {}, {"engine": ack or []})}
            if ack is None and "engine-untrusted-option" not in got:
                if vllm_reads(key.split(".", 1)[0]) is None:
                    return None  # vLLM refuses the spelling itself
                return f"{key}: not flagged ({sorted(got)})"
            if ack is not None and "engine-untrusted-option" in got:
                return f"{key}: flagged though acknowledged"
            return None

        return run

    for flag, (kind, _what) in sorted(UNTRUSTED_OPTIONS.items()):
        if flag not in opts:
            continue
        for s in spellings(flag, False):
            if "." in s:
                continue
            yield ("untrusted", f"option-{kind}", f"{s}", opt_case(s, "x.y", None))
        yield ("untrusted", "acknowledged", flag, opt_case(flag, "x.y", [flag.replace("-", "_")]))

    def nest(dotted: str, value: object) -> dict:
        """{"a": {"b": value}} for "a.b" (a nested sub-key such as kv_connector_extra_config.shared_storage_path)."""
        for part in reversed(dotted.split(".")):
            value = {part: value}
        return value  # type: ignore[return-value]

    for (flag, sub), (kind, _what) in sorted(UNTRUSTED_SUBKEYS.items()):
        value = "evil.backend" if sub == "backend" else "evil.module"
        yield ("untrusted", f"subkey-{kind}", f"{flag}={{{sub}}}", opt_case(flag, nest(sub, value), None))
        yield ("untrusted", f"subkey-{kind}", f"{flag}.{sub}", opt_case(f"{flag.replace('-', '_')}.{sub}", value, None))
        yield ("untrusted", f"subkey-{kind}", f"{flag} JSON string", opt_case(flag, json.dumps(nest(sub, value)), None))

    def env_case(name: str, ack: bool) -> Callable[[], str | None]:
        def run() -> str | None:
            got = {f.code for f in launch_refusals({}, {name: "/x"}, {"env": [name] if ack else []})}
            flagged = "env-untrusted-entry" in got
            return None if flagged != ack else f"env.{name}: {'flagged though acknowledged' if ack else 'not flagged'}"

        return run

    names = sorted(UNTRUSTED_ENV) + [
        "LD_PRELOAD",
        "LD_AUDIT",
        "LD_LIBRARY_PATH",
        "DYLD_INSERT_LIBRARIES",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONWARNINGS",
        "PYTHONBREAKPOINT",
        "PYTHONUSERBASE",
        "http_proxy",
        "https_proxy",
        "hf_endpoint",
    ]
    for n in names:
        yield ("untrusted", "env", n, env_case(n, False))
        yield ("untrusted", "acknowledged", f"env {n}", env_case(n, True))

    def harmless(name: str) -> Callable[[], str | None]:
        def run() -> str | None:
            got = {f.code for f in launch_refusals({}, {name: "1"})}
            return None if "env-untrusted-entry" not in got else f"{name} flagged (ordinary tuning)"

        return run

    for n in ("NCCL_DEBUG", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "VLLM_CPU_KVCACHE_SPACE", "CUDA_VISIBLE_DEVICES"):
        yield ("untrusted", "ordinary-env", n, harmless(n))


# ---------------------------------------------------------------------------------------------
# persisted inputs

WRONG_VALUES = {
    "string": '"x"',
    "bool": "true",
    "null": "null",
    "list": "[]",
    "object": "{}",
    "inf": "1e999",
    "-inf": "-1e999",
    "big-int": "1" + "0" * 400,
    "negative": "-5",
}


def _valid_report(name: str = "baseline") -> dict:
    return {
        "schema": "ppspec-verify-report/1",
        "endpoint": "http://127.0.0.1:8000",
        "model": "m",
        "prompt_set": {"name": "builtin", "version": 1, "sha256": "a" * 64},
        "settings": {"num_prompts": 2, "max_tokens": 8, "seed": 0},
        "speculative": {"configured": True, "synthetic_acceptance": False},
        "counters_delta": {"vllm:spec_decode_num_drafts_total": 4.0},
        "spec_decode": {
            "configured": True,
            "status": "ok",
            "drafts": 4,
            "draft_tokens": 12,
            "accepted_tokens": 6,
            "mean_acceptance_length": 2.5,
            "acceptance_rate": 0.5,
            "per_position_acceptance": [0.7, 0.5, 0.3],
        },
        "throughput": {"output_tokens": 16, "wall_time_s": 1.0},
        "outputs": [
            {"id": "p1", "text": "a", "completion_tokens": 8},
            {"id": "p2", "text": "b", "completion_tokens": 8},
        ],
        "task_score": {"correct": 1, "total": 2, "score": 0.5},
        "per_engine": {},
        "gates": [],
        "warnings": [],
    }


def _paths(doc: object, at: tuple = ()) -> Iterator[tuple]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (*at, k)
            yield from _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:2]):
            yield (*at, i)
            yield from _paths(v, (*at, i))


def _set_raw(doc: dict, path: tuple, raw: str) -> str:
    """The document as JSON text with the value at `path` replaced by the raw JSON `raw`."""
    marker = "__PPSPEC_ATTACK_MARKER__"
    d = json.loads(json.dumps(doc))
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = marker
    return json.dumps(d).replace(json.dumps(marker), raw)


def _report_case(text: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.verify.gates import evaluate_gates
        from ppspec_cli.verify.report import load_report

        with tempfile.TemporaryDirectory() as td:
            p = Path(td) / "b.json"
            p.write_text(text)
            try:
                doc = load_report(p, "baseline")
            except PpspecError as e:
                return (
                    None
                    if e.exit_code == 2 and str(p) in e.render()
                    else f"exit {e.exit_code} / file not named: {e.what[:80]}"
                )
            except Exception as e:  # noqa: BLE001
                return f"load crashed: {type(e).__name__}: {str(e)[:80]}"
            # accepted: the gates after the run must not crash on it, and the report must be writable
            cur = _valid_report()
            try:
                evaluate_gates(cur, ["acceptance", "drafter", "output", "task"], baseline=doc, reference=doc)
            except PpspecError:
                pass
            except Exception as e:  # noqa: BLE001
                return f"accepted, then the gates crashed: {type(e).__name__}: {str(e)[:80]}"
        return None

    return run


def _status_case(text: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.running.engine.plugin import read_status_dir
        from ppspec_cli.running.serve.confirm import plugin_record, unconfirmed

        good = json.loads(_status_valid())
        with tempfile.TemporaryDirectory() as td:
            (Path(td) / "123.json").write_text(text)
            try:
                recs = read_status_dir(td)
                unconfirmed(Path(td))
                plugin_record(Path(td))
            except Exception as e:  # noqa: BLE001
                return f"crashed: {type(e).__name__}: {str(e)[:80]}"
            r = recs[0]
            if r.get("ok") is not True and r.get("ok") and text != json.dumps(good):
                return f"a non-boolean ok {r.get('ok')!r} was taken as ok"
        return None

    return run


def _status_valid() -> str:
    return json.dumps(
        {
            "pid": 123,
            "ok": True,
            "role": "api",
            "rank": 0,
            "pp_rank": 0,
            "pack": None,
            "vllm": "0.32.0",
            "error": None,
            "workers_confirmed": True,
            "patches": [],
        }
    )


def _plan_case(text: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.running.planfile import PlanFileError, read_plan_file

        with tempfile.TemporaryDirectory() as td:
            p = Path(td) / "plan.json"
            p.write_text(text)
            try:
                read_plan_file(p)
            except PlanFileError:
                return None
            except Exception as e:  # noqa: BLE001
                return f"crashed: {type(e).__name__}: {str(e)[:80]}"
        return None

    return run


def _file_kind_case(loader: str, kind: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.running.planfile import read_plan_file
        from ppspec_cli.verify.report import load_report

        with tempfile.TemporaryDirectory() as td:
            p = Path(td) / "f.json"
            if kind == "fifo":
                os.mkfifo(p)
            elif kind == "directory":
                p.mkdir()
            elif kind == "symlink-to-dir":
                p.symlink_to(td)
            elif kind == "empty":
                p.write_text("")
            elif kind == "not-json":
                p.write_text("{nope")
            elif kind == "array":
                p.write_text("[]")
            elif kind == "deep":
                p.write_text("[" * 100000 + "]" * 100000)
            try:
                (load_report if loader == "baseline" else read_plan_file)(p)
                return "accepted"
            except PpspecError as e:
                if "not found" in e.what and kind in ("fifo", "directory", "symlink-to-dir"):
                    return f"a {kind} reported as not found"
                return None
            except Exception as e:  # noqa: BLE001
                return f"crashed: {type(e).__name__}: {str(e)[:80]}"

    return run


def persisted_cases() -> Iterator[Case]:
    base = _valid_report()
    for path in _paths(base):
        for wname, raw in WRONG_VALUES.items():
            yield ("persisted", f"baseline:{wname}", ".".join(map(str, path)), _report_case(_set_raw(base, path, raw)))
    status = json.loads(_status_valid())
    for path in _paths(status):
        for wname, raw in WRONG_VALUES.items():
            yield ("persisted", f"status:{wname}", ".".join(map(str, path)), _status_case(_set_raw(status, path, raw)))
    plan = {
        "format": "ppspec-plan/1",
        "profile": "p",
        "pack": None,
        "plan": {},
        "expect": {"pp": 2, "tp": 1, "partition": [1, 1], "taps": [1], "draft_layer_start": 2, "num_layers": 2},
        "status_dir": "/tmp/x",
    }
    for path in _paths(plan):
        for wname, raw in WRONG_VALUES.items():
            yield ("persisted", f"plan:{wname}", ".".join(map(str, path)), _plan_case(_set_raw(plan, path, raw)))
    for loader in ("baseline", "plan"):
        for kind in ("fifo", "directory", "symlink-to-dir", "empty", "not-json", "array", "deep"):
            yield ("persisted", f"file-kind:{kind}", f"{loader}:{kind}", _file_kind_case(loader, kind))


# ---------------------------------------------------------------------------------------------
# run dir


def _rundir_case(op: str, swap: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.running.serve.rundir import RunDir

        with tempfile.TemporaryDirectory() as td:
            t = Path(td)
            run_dir, victim = t / "run", t / "victim"
            run_dir.mkdir()
            victim.mkdir()
            (victim / "precious").write_text("keep\n")
            (victim / "tmp").mkdir()
            (victim / "tmp" / "precious").write_text("keep\n")
            rd = RunDir.open(run_dir)
            try:
                (run_dir / "tmp").mkdir()
                (run_dir / "tmp" / "ours").write_text("x")
                if swap == "dir-swapped-for-link":
                    os.rename(run_dir, t / "run.moved")
                    run_dir.symlink_to(victim)
                elif swap == "entry-is-link":
                    os.symlink(victim / "precious", run_dir / "launch.json")
                    os.rmdir(run_dir / "tmp") if False else None
                elif swap == "tmp-is-link":
                    (run_dir / "tmp" / "ours").unlink()
                    (run_dir / "tmp").rmdir()
                    (run_dir / "tmp").symlink_to(victim / "tmp")
                elif swap == "entry-is-fifo":
                    os.mkfifo(run_dir / "launch.json")
                try:
                    if op == "write":
                        rd.write_text("launch.json", "{}\n", what="launch.json")
                    elif op == "open-log":
                        rd.open_write("launch.json").close()
                    elif op == "rmtree-tmp":
                        rd.rmtree("tmp")
                    elif op == "unlink":
                        rd.unlink("launch.json")
                    elif op == "mkdir":
                        rd.mkdir("tmp").close()
                except PpspecError:
                    pass
                except Exception as e:  # noqa: BLE001
                    return f"crashed: {type(e).__name__}: {str(e)[:80]}"
            finally:
                rd.close()
            if (victim / "precious").read_text() != "keep\n" or not (victim / "tmp" / "precious").exists():
                return "touched a file outside the run directory"
            if sorted(os.listdir(victim)) != ["precious", "tmp"]:
                return f"created {sorted(os.listdir(victim))} outside the run directory"
        return None

    return run


def rundir_cases() -> Iterator[Case]:
    for op in ("write", "open-log", "rmtree-tmp", "unlink", "mkdir"):
        for swap in ("none", "dir-swapped-for-link", "entry-is-link", "tmp-is-link", "entry-is-fifo"):
            yield ("run-dir", swap, f"{op} / {swap}", _rundir_case(op, swap))


# ---------------------------------------------------------------------------------------------
# validation of command-line and environment values


def validation_cases() -> Iterator[Case]:
    from ppspec_cli.errors import PpspecError

    def expect_exit2(fn: Callable[[], object], label: str) -> Callable[[], str | None]:
        def run() -> str | None:
            try:
                fn()
            except PpspecError as e:
                return None if e.exit_code == 2 else f"{label}: exit {e.exit_code}"
            except Exception as e:  # noqa: BLE001
                return f"{label}: crashed {type(e).__name__}: {str(e)[:60]}"
            return f"{label}: accepted"

        return run

    from ppspec_cli.running.cluster import _slurm_int, check_host

    for v in ("²", "١", "-1", " 1", "1\n", "", "1e3", "0x1", "１"):
        yield (
            "validation",
            "slurm-nodeid",
            repr(v),
            expect_exit2(lambda v=v: _slurm_int({"SLURM_NODEID": v}, "SLURM_NODEID"), "SLURM_NODEID"),
        )

    def nodelist(v: str, nodeid: str = "0", nnodes: str = "2") -> None:
        from ppspec_cli.running.cluster import slurm_from_env

        slurm_from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": v, "SLURM_NODEID": nodeid, "SLURM_NNODES": nnodes})

    for v in (
        "-oProxyCommand=x",
        "node[1-2]\n",
        "a b",
        "n;id",
        "$(id)",
        "n\x1b[2J",
        "n\x00",
        "n" * 70000,
        "nöde",
        "--help",
    ):
        yield (
            "validation",
            "slurm-nodelist",
            repr(v[:12]),
            expect_exit2(lambda v=v: nodelist(v), "SLURM_JOB_NODELIST"),
        )
    for nodeid, nnodes in (("2", "2"), ("999999", "2"), ("1", "0"), ("0", "-1"), ("0", "99999999999")):
        yield (
            "validation",
            "slurm-nodeid",
            f"{nodeid}/{nnodes}",
            expect_exit2(lambda i=nodeid, n=nnodes: nodelist("node[1-2]", i, n), "SLURM_NODEID/SLURM_NNODES"),
        )
    for v in ("", "host\n", "-oProxyCommand=x", "a b", "a;b", "$(id)", "h\x1b", "x" * 300, "..", "a..b."):
        for where in ("--master-addr", "--host"):
            yield (
                "validation",
                "host",
                f"{where} {v[:12]!r}",
                expect_exit2(lambda v=v, w=where: check_host(v, w), where),
            )

    def image(v: str) -> None:
        from ppspec_cli.running.export import check_image

        check_image(v)

    for v in (
        "",
        "img\n",
        "-x",
        "a b",
        'img"x',
        "x" * 600,
        "Img/Upper",
        "img:",
        "img::t",
        "a//b",
        "img+x",
        "img/",
        ".img",
        "img@sha256:zz",
        "img:" + "t" * 200,
        "img\u200b",
        "img\x00",
    ):
        yield ("validation", "image", repr(v[:12]), expect_exit2(lambda v=v: image(v), "--image"))

    def secret(v: str) -> None:
        from ppspec_cli.commands.export import k8s

        k8s(profile="/nonexistent.yaml", image="img", output=None, api_key_secret=v, host=None, offline=True)

    for v in ("key\n", "Key", "-k", "a_b", ""):
        yield ("validation", "api-key-secret", repr(v), expect_exit2(lambda v=v: secret(v), "--api-key-secret"))

    def profile_host(v: str) -> None:
        from ppspec_cli.planning.profile import parse_profile

        parse_profile(json.dumps({"name": "p", "target": {"model": "x"}, "server": {"host": v}}), "p.yaml")

    for v in ("", " ", "h\n", "-h", "a b"):
        yield ("validation", "profile-host", repr(v), expect_exit2(lambda v=v: profile_host(v), "server.host"))

    def endpoint(v: str) -> None:
        from ppspec_cli.verify.client import normalize_endpoint

        normalize_endpoint(v)

    for v in ("http://127.0.0.1:0", "http://127.0.0.1:70000", "http://:8000", "ftp://x", "http://u:p@x"):
        yield ("validation", "endpoint", v, expect_exit2(lambda v=v: endpoint(v), "--endpoint"))


# ---------------------------------------------------------------------------------------------


MECHANISMS: dict[str, Callable[[], Iterator[Case]]] = {
    "terminal": terminal_cases,
    "writers": writer_cases,
    "network": network_cases,
    "engine-options": engine_option_cases,
    "untrusted": untrusted_cases,
    "persisted": persisted_cases,
    "run-dir": rundir_cases,
    "validation": validation_cases,
}


from .cases3 import MECHANISMS3  # noqa: E402 - round 3's entry points (issue 32)

MECHANISMS.update(MECHANISMS3)

from .cases4 import MECHANISMS4  # noqa: E402 - round 4's (issue 42)

MECHANISMS.update(MECHANISMS4)


def all_cases() -> Iterator[Case]:
    for gen in MECHANISMS.values():
        yield from gen()


def run_mechanism(name: str) -> dict[str, list]:
    """{class: [cases, problems...]} for one mechanism."""
    out: dict[str, list] = {}
    for _mech, cls, label, fn in MECHANISMS[name]():
        entry = out.setdefault(cls, [0])
        entry[0] += 1
        problem = fn()
        if problem:
            entry.append(f"{label}: {problem}")
    return out
