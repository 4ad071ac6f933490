"""Which wheels travel to the device (benchmarks/gpu_wheels.sh calls this; tests/test_gpu_wheels_select.py
tests it without a network).

Sub-commands (each reads pip `--report` JSON files, written by `pip install --dry-run --report`):

  requirements VLLM_REPORT --override NAME==VER ...
      vLLM's own requirements for the device's Python (markers evaluated, extras left out), with each
      overridden pin replaced by the override: what gpu_wheels.sh resolves when a pin cannot be met
      (vLLM 0.34.0 pins flashinfer-python==0.7.3, which the registry does not carry).
  merge VLLM_REPORT REST_REPORT --override ...
      one report: vLLM's item plus the resolved rest, with the overrides recorded under
      "ppspec_overrides" (asked vs used).
  candidates REPORT [selection options]
      the device packages the selection keeps that belong to the resolved set and whose device
      version is known, as NAME==VERSION: their metadata is what the reverse check reads.
  select REPORT [selection options] [--device-meta REPORT] [--manifest FILE]
      "name version file url" per wheel to carry (a FORCE_CARRY wheel has "? ?"), notes on stderr,
      and the manifest (what travels and why, overrides included) into FILE.

The selection, per tier (gpu_wheels.sh's header): a package the device has is kept when its version
satisfies what the carried set asks of it (the forward check), and then only when what the kept
package itself asks of the carried set is met (the reverse check): vLLM 0.34.0 carries
huggingface-hub 2.x, which the device's transformers 5.17.0 refuses (< 2.0) at import, so
transformers travels too, at the resolved version.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

#: The device's interpreter (KINDS.md: Python 3.12.3, Linux x86_64), for environment markers.
TARGET_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "sys_platform": "linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_version": "",
    "implementation_version": "3.12.3",
    "extra": "",
}
#: Kept from the device only when nothing pins them (their versions must match torch's).
TORCH_FAMILY = ("torch", "triton", "torchvision", "torchaudio")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(v: str | None) -> Version | None:
    try:
        return Version(v) if v else None
    except InvalidVersion:
        return None


def applicable(requires_dist: list[str] | None) -> list[Requirement]:
    """The requirements that apply on the device without extras."""
    out = []
    for r in requires_dist or []:
        try:
            req = Requirement(r)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(TARGET_ENV):
            continue
        out.append(req)
    return out


def parse_overrides(items: list[str]) -> dict[str, str]:
    """NAME==VERSION each (also space-separated in one string): {normalised name: version}."""
    out: dict[str, str] = {}
    for chunk in items:
        for x in chunk.split():
            name, sep, version = x.partition("==")
            if not sep or not name or _version(version) is None:
                raise SystemExit(f"gpu_wheels: override {x!r} is not NAME==VERSION")
            out[norm(name)] = version
    return out


def _load_items(path: str) -> list[dict]:
    return json.loads(Path(path).read_text())["install"]


def requirement_lines(vllm_item: dict, overrides: dict[str, str]) -> tuple[list[str], list[dict]]:
    """vLLM's applicable requirements as requirement lines (no markers: already evaluated), each
    overridden one replaced; the notes say what was asked and what is used instead."""
    lines, notes = [], []
    seen = set()
    for req in applicable(vllm_item["metadata"].get("requires_dist")):
        n = norm(req.name)
        if n in overrides:
            if n not in seen:
                lines.append(f"{n}=={overrides[n]}")
            notes.append(
                {
                    "name": n,
                    "asked_by": f"{norm(vllm_item['metadata']['name'])} {vllm_item['metadata']['version']}",
                    "asked": str(req.specifier) or "(any)",
                    "used": overrides[n],
                }
            )
        else:
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            lines.append(f"{req.name}{extras}{req.specifier}")
        seen.add(n)
    missing = sorted(set(overrides) - seen)
    if missing:
        raise SystemExit(
            f"gpu_wheels: override(s) for {', '.join(missing)}: vLLM {vllm_item['metadata']['version']} does not ask "
            "for them"
        )
    return lines, notes


def merge(vllm_report: str, rest_report: str, overrides: dict[str, str]) -> dict:
    vllm_item = _load_items(vllm_report)[0]
    _lines, notes = requirement_lines(vllm_item, overrides)
    rest = [it for it in _load_items(rest_report) if norm(it["metadata"]["name"]) != "vllm"]
    return {"version": "1", "install": [vllm_item, *rest], "ppspec_overrides": notes}


def device_versions(device_list: str | None, kinds_md: str | None) -> dict[str, str | None]:
    """name -> the device's version (None: the name is known, the version not)."""
    device: dict[str, str | None] = {}
    if device_list:
        for row in json.loads(Path(device_list).read_text()):
            device[norm(row["name"])] = row["version"]
        return device
    try:
        full = Path(kinds_md or "").read_text()
        text = full.split("## Python packages already there", 1)[1].split("Packages:", 1)[1]
        for n in text.split("\n\n")[0].replace("\n", " ").rstrip(". ").split(","):
            device[norm(n.strip())] = None
        # the few versions KINDS.md records
        row = full.split("pip list, as a session saw it", 1)[1].split("\n", 1)[0]
        for n, v in re.findall(r"([A-Za-z0-9_.-]+) (\d[\w.+]*)", row):
            if norm(n) in device:
                device[norm(n)] = v
    except (OSError, IndexError):
        pass
    return device


class Selection:
    """The forward selection, then the reverse check to a fixpoint."""

    def __init__(self, items, tier, device, lean_skip, forced, overrides):
        self.items = {norm(it["metadata"]["name"]): it for it in items}
        self.tier, self.device, self.overrides = tier, device, overrides
        self.forced = forced
        self.skip = set(lean_skip) if tier == "lean" else set()
        self.specs: dict[str, list] = {}  # name -> [(specifier, who asks)]
        for it in items:
            who = f"{norm(it['metadata']['name'])} {it['metadata']['version']}"
            for req in applicable(it["metadata"].get("requires_dist")):
                n = norm(req.name)
                if n in overrides:
                    continue  # the override replaces every pin on it (recorded in the manifest)
                self.specs.setdefault(n, []).append((req.specifier, who))
        for n, v in overrides.items():
            self.specs.setdefault(n, []).append((Requirement(f"{n}=={v}").specifier, "override"))
        self.carried: dict[str, str] = {}  # name -> version (the resolved one)
        self.kept: dict[str, str | None] = {}  # resolved packages left to the device: name -> device version
        self.trusted: set[str] = set()  # the device's CUDA libraries (minimal, lean)
        self.notes: list[str] = []
        self._forward()

    def _forward(self) -> None:
        for name, it in self.items.items():
            version = it["metadata"]["version"]
            if name in self.skip or name in self.forced:
                continue
            cuda = name.startswith("nvidia-") or name.startswith("cuda-")
            if self.tier in ("lean", "minimal") and cuda and name in self.device:
                self.trusted.add(name)
                continue
            if self.tier == "full" and cuda and self.device.get(name) != version:
                self.carried[name] = version  # torch pins these through cuda-toolkit's extras
                continue
            if name in self.device and self._device_will_do(name):
                self.kept[name] = self.device[name]
                continue
            self.carried[name] = version

    def _device_will_do(self, name: str) -> bool:
        have = self.device[name]
        if name == "vllm":
            return False
        if have is None:
            # version unknown: kept unless something pins it
            pinned = any(x.operator in ("==", "===") for s, _w in self.specs.get(name, []) for x in s)
            return not pinned and name not in TORCH_FAMILY
        v = _version(have)
        return v is not None and all(s.contains(v, prereleases=True) for s, _w in self.specs.get(name, []))

    def version_in_set(self, name: str) -> str | None:
        return self.forced.get(name) or self.carried.get(name)

    def candidates(self) -> list[str]:
        """Kept resolved packages with a known device version: the ones the reverse check can read."""
        return sorted(f"{n}=={v}" for n, v in self.kept.items() if v is not None)

    def reverse(self, device_meta: dict[str, dict]) -> None:
        """A kept package whose own requirements the carried set breaks travels too, at its resolved
        version; repeated until nothing changes (carrying one can break another kept package)."""
        changed = True
        while changed:
            changed = False
            for name, have in sorted(self.kept.items()):
                md = device_meta.get(name)
                if have is None or md is None or md.get("version") != have:
                    continue
                for req in applicable(md.get("requires_dist")):
                    n = norm(req.name)
                    got = self.version_in_set(n)
                    if got is None or req.specifier.contains(Version(got), prereleases=True):
                        continue
                    resolved = self.items[name]["metadata"]["version"]
                    if resolved == have:
                        # the same version's metadata: pip accepted it in the set, so this device build
                        # differs from the registry's (a local label); carrying it changes nothing
                        self.notes.append(
                            f"reverse check: the device's {name} {have} asks {n}{req.specifier} and the set carries "
                            f"{n} {got},"
                            " but the registry's build of that version fits the set: kept"
                        )
                        continue
                    self.notes.append(
                        f"reverse check: the device's {name} {have} asks {n}{req.specifier}, the set carries {n} {got}:"
                        f" carrying {name} {resolved} (the resolved version) too"
                    )
                    del self.kept[name]
                    self.carried[name] = resolved
                    changed = True
                    break
        unchecked = sorted(n for n, v in self.kept.items() if v is None or n not in device_meta)
        if unchecked:
            self.notes.append(
                "reverse check: device version or metadata unknown, not checked (give --device-pip-list): "
                + ", ".join(unchecked)
            )

    def rows(self) -> list[tuple[str, str, str, str]]:
        out = [(n, v, "?", "?") for n, v in self.forced.items()]
        for name, version in self.carried.items():
            url = self.items[name]["download_info"]["url"]
            out.append((name, version, url.rsplit("/", 1)[1], url))
        return out


def _selection(a) -> Selection:
    forced = {norm(x.split("==", 1)[0]): x.split("==", 1)[1] for x in (a.force_carry or "").split() if "==" in x}
    return Selection(
        _load_items(a.report),
        a.tier,
        device_versions(a.device_pip_list, a.kinds_md),
        (a.lean_skip or "").split(),
        forced,
        parse_overrides(a.override or []),
    )


def _device_meta(path: str | None) -> dict[str, dict]:
    if not path or not Path(path).is_file():
        return {}
    return {norm(it["metadata"]["name"]): it["metadata"] for it in _load_items(path)}


def manifest(sel: Selection, report: dict, tier: str) -> str:
    vllm = sel.items.get("vllm", {}).get("metadata", {}).get("version", "?")
    lines = [f"# ppspec gpu_wheels.sh: vllm {vllm}, tier {tier}"]
    for o in report.get("ppspec_overrides") or []:
        lines.append(f"override: {o['name']}=={o['used']} ({o['asked_by']} asks {o['name']}{o['asked']})")
    lines += [f"note: {n}" for n in sel.notes]
    lines += [f"carried: {n}=={v}" for n, v, _f, _u in sorted(sel.rows())]
    lines += [f"device: {n}=={v or '?'}" for n, v in sorted(sel.kept.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_wheels_select.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("requirements")
    r.add_argument("vllm_report")
    m = sub.add_parser("merge")
    m.add_argument("vllm_report")
    m.add_argument("rest_report")
    for p in (r, m):
        p.add_argument("--override", action="append")
    for name in ("candidates", "select"):
        p = sub.add_parser(name)
        p.add_argument("report")
        p.add_argument("--tier", default="lean", choices=("lean", "minimal", "full"))
        p.add_argument("--device-pip-list")
        p.add_argument("--kinds-md")
        p.add_argument("--lean-skip", default="")
        p.add_argument("--force-carry", default="")
        p.add_argument("--override", action="append")
        if name == "select":
            p.add_argument("--device-meta")
            p.add_argument("--manifest")
    a = ap.parse_args(argv)
    if a.cmd == "requirements":
        lines, _notes = requirement_lines(_load_items(a.vllm_report)[0], parse_overrides(a.override or []))
        print("\n".join(lines))
    elif a.cmd == "merge":
        print(json.dumps(merge(a.vllm_report, a.rest_report, parse_overrides(a.override or [])), indent=1))
    elif a.cmd == "candidates":
        print("\n".join(_selection(a).candidates()))
    else:
        sel = _selection(a)
        sel.reverse(_device_meta(a.device_meta))
        for n in sel.notes:
            print(f"gpu_wheels: {n}", file=sys.stderr)
        for row in sel.rows():
            print(*row)
        if a.manifest:
            Path(a.manifest).write_text(manifest(sel, json.loads(Path(a.report).read_text()), a.tier))
    return 0


if __name__ == "__main__":
    sys.exit(main())
