"""Time to ready: `ppspec serve PROFILE` next to the same `vllm serve` command line started by hand,
measured in one run on this machine (one start each by default, bare vLLM first; `--ppspec-first`
swaps the order, `--rounds N` alternates N times and prints medians). Prints both times, the difference and the ratio,
and the moments at which
ppspec's progress lines arrived (where its time goes: preflight, engine start, confirmation).

"Ready" for the bare engine is its first 200 on /health; for ppspec, the moment it prints
`serving at ...` (after /health answered and the plugin was confirmed in every engine process),
which is what a user waits for. Both are polled the same way (every 0.1 s by this script for the
bare engine; ppspec polls its engine itself). The bare command is node 0's argv and environment of
`ppspec serve PROFILE --dry-run --json` without the PPSPEC_* variables, so ppspec's vLLM plugin stays
inert in it, exactly as in a hand-started `vllm serve`.

    .venv/bin/python benchmarks/time_to_ready.py [PROFILE] [--timeout 600] [--ppspec-first]

The script holds /tmp/ppspec-engine.lock (flock, as the engine tests do) while an engine runs: one
engine at a time on this machine; do not wrap it in `flock` on the same file (it would wait on
itself). Each
engine runs in its own process group with a private TMPDIR on a free loopback port; the group is
killed afterwards.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
LOCK = "/tmp/ppspec-engine.lock"
PPSPEC = [sys.executable, "-m", "ppspec_cli.cli"]


STARTS: dict[str, float] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as r:  # noqa: S310 - loopback only
            return r.status == 200
    except OSError:
        return False


def stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


#: Moments of an engine start, as vLLM logs them (first match of each), to compare both runs.
MILESTONES = [
    ("first engine log line", r"."),
    ("API server starts", r"vLLM API server version|non-default args"),
    ("engine core starts", r"Initializing a V1 LLM engine|EngineCore"),
    ("model weights loaded", r"Loading weights took|Model loading took"),
    ("KV cache / warm-up done", r"init engine .* took|KV cache"),
    ("API routes up", r"Starting vLLM server|Available routes|Route:"),
    ("application ready", r"Application startup complete"),
]
_STAMP = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def milestones(log: Path, t0_wall: float) -> dict[str, float]:
    """Seconds after exec (wall clock, 1 s resolution: vLLM stamps its lines to the second) at
    which each milestone's first line was logged."""
    out: dict[str, float] = {}
    year = datetime.fromtimestamp(t0_wall).year
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        m = _STAMP.search(line)
        if not m:
            continue
        mo, d, hh, mm, ss = map(int, m.groups())
        t = datetime(year, mo, d, hh, mm, ss).timestamp() - t0_wall
        for name, pat in MILESTONES:
            if name not in out and re.search(pat, line):
                out[name] = t
    return out


def base_env() -> dict:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": str(REPO)})
    return env


def bare(argv: list[str], env: dict, url: str, timeout: float, log: Path) -> float:
    """Seconds from exec to the first 200 on /health."""
    with open(log, "w") as out:
        STARTS["bare"] = time.time()
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            while time.monotonic() - t0 < timeout:
                if proc.poll() is not None:
                    raise SystemExit(f"the bare engine exited with {proc.returncode}: see {log}")
                if healthy(url):
                    return time.monotonic() - t0
                time.sleep(0.1)
            raise SystemExit(f"the bare engine was not healthy within {timeout:.0f}s: see {log}")
        finally:
            stop(proc)


def with_ppspec(profile: Path, run_dir: Path, env: dict, timeout: float) -> tuple[float, list[tuple[float, str]]]:
    """Seconds from exec of `ppspec serve` to its `serving at` line, and every stderr line with the
    second it arrived at."""
    STARTS["ppspec"] = time.time()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*PPSPEC, "serve", str(profile), "--run-dir", str(run_dir)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[tuple[float, str]] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.monotonic() - t0, line.rstrip("\n")))
            if "serving at" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        while not ready.wait(0.1):
            if proc.poll() is not None or time.monotonic() - t0 > timeout:
                tail = "\n".join(x for _, x in lines[-20:])
                raise SystemExit(f"ppspec serve did not become ready (rc {proc.poll()}):\n{tail}")
        return next(t for t, x in lines if "serving at" in x), lines
    finally:
        stop(proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", nargs="?", default=str(REPO / "profiles" / "tiny_cpu_demo.yaml"))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument(
        "--ppspec-first", action="store_true", help="start ppspec's run first (default: the bare engine first)"
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="start each this many times, alternating which goes first; medians are printed (default 1)",
    )
    ap.add_argument(
        "--keep", action="store_true", help="keep the work directory (both engine logs) and print where it is"
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ppspec-ttr-"))
    try:
        port = free_port()
        data = yaml.safe_load(Path(args.profile).read_text())
        data.setdefault("server", {})["port"] = port
        profile = work / "profile.yaml"
        profile.write_text(yaml.safe_dump(data, sort_keys=False))
        env = base_env()
        run_dir = work / "run"
        dry = subprocess.run(
            [*PPSPEC, "serve", str(profile), "--dry-run", "--json", "--run-dir", str(run_dir)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if dry.returncode != 0:
            raise SystemExit(f"serve --dry-run failed ({dry.returncode}):\n{dry.stdout}{dry.stderr}")
        node = json.loads(dry.stdout)["nodes"][0]
        bare_env = {k: v for k, v in env.items() if not k.startswith("PPSPEC_")}
        bare_env.update({k: v for k, v in node["env"].items() if not k.startswith("PPSPEC_")})
        tmp = work / "bare-tmp"
        tmp.mkdir()
        bare_env["TMPDIR"] = str(tmp)
        url = f"http://127.0.0.1:{port}"
        sys.path.insert(0, str(REPO))
        from ppspec_cli.knowledge import installcache

        key = installcache.install_key()
        if key is not None and installcache.read("serve-options", key) is not None:
            cache_state = "warm (the serve parser is not imported: see knowledge/engine.serve_option_names)"
        else:
            cache_state = "cold (this run imports vLLM's serve parser before the engine starts)"
        order = ["ppspec", "bare"] if args.ppspec_first else ["bare", "ppspec"]
        times: dict[str, list[float]] = {"bare": [], "ppspec": []}
        lines: list[tuple[float, str]] = []
        for i in range(args.rounds):
            with open(LOCK, "w") as lock:  # held per round: other engines on this machine get their turn between rounds
                fcntl.flock(lock, fcntl.LOCK_EX)
                for which in order if i % 2 == 0 else order[::-1]:  # alternate who goes first
                    if which == "bare":
                        times["bare"].append(bare(node["argv"], bare_env, url, args.timeout, work / "bare.log"))
                    else:
                        t, lines = with_ppspec(profile, run_dir, env, args.timeout)
                        times["ppspec"].append(t)
        got = {k: statistics.median(v) for k, v in times.items()}
        if args.rounds > 1:
            print(
                f"{args.rounds} rounds, alternating; medians below. bare: "
                f"{', '.join(f'{t:.1f}' for t in times['bare'])} s; "
                f"ppspec: {', '.join(f'{t:.1f}' for t in times['ppspec'])} s"
            )
        print(f"profile: {args.profile}")
        print(f"vLLM option cache before the run: {cache_state}")
        print(f"bare `vllm serve` (same argv and env, plugin inert): ready in {got['bare']:.1f} s")
        print(f"`ppspec serve`: ready in {got['ppspec']:.1f} s")
        d = got["ppspec"] - got["bare"]
        print(f"difference: {d:+.1f} s; ratio ppspec/bare: {got['ppspec'] / got['bare']:.3f}")
        print("ppspec's progress lines (seconds after exec):")
        for t, x in lines:
            if x.startswith("ppspec:"):
                print(f"  {t:6.1f}  {x[:110]}")
        mb = milestones(work / "bare.log", STARTS["bare"])
        mp = milestones(run_dir / "engine.log", STARTS["ppspec"])
        print("where the time goes (seconds after exec, from vLLM's own timestamps, +-1 s):")
        print(f"  {'milestone':28} {'bare':>6} {'ppspec':>7} {'diff':>6}")
        for name, _ in MILESTONES:
            if name in mb or name in mp:
                b, q = mb.get(name), mp.get(name)
                diff = f"{q - b:+6.0f}" if b is not None and q is not None else "     —"
                print(
                    f"  {name:28} {'—' if b is None else f'{b:6.0f}':>6} {'—' if q is None else f'{q:7.0f}':>7} {diff}"
                )
        within = d <= 2.0 or got["ppspec"] <= 1.05 * got["bare"]
        print(f"within 5% or 2 s of the bare engine: {'yes' if within else 'no'}")
        return 0
    finally:
        if args.keep:
            print(f"logs kept in {work} (bare.log, run/engine.log)")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
