"""What every command shares: the stderr progress line, the error console, loading and resolving a
profile, and the JSON report of a resolved profile."""

from __future__ import annotations

import sys
from typing import Any


def err_console():
    from ppspec_cli.io import terminal

    return terminal.console(stderr=True)


def progress(msg: str, *, wrap: bool = True) -> None:
    """One `ppspec: ...` line on stderr, wrapped between words at the terminal's width (io.terminal
    .wrap_width: a pipe keeps it one line). A message of several lines is laid out already (a
    command to copy: io.terminal.command_block) and printed as it is, as with wrap=False."""
    from ppspec_cli.io import terminal

    line = f"ppspec: {msg}"
    if wrap and "\n" not in msg:
        line = terminal.wrap_block(line, terminal.wrap_width())
    print(line, file=sys.stderr, flush=True)


def print_error(e) -> None:
    """A PpspecError's what / where / fix on stderr, each wrapped between words under its label."""
    from ppspec_cli.io import terminal

    print(terminal.wrap_block(e.render(), terminal.wrap_width()), file=sys.stderr, flush=True)


def load(profile_path: str):
    """The profile, read and validated once per command (every step after gets the object)."""
    from ppspec_cli.planning.profile import load_profile

    return load_profile(profile_path)


def engine_json(r) -> dict[str, Any]:
    """One resolved engine, as `--json` shows it."""
    inst = r.installed
    return {
        "profile": r.profile.name,
        "platform": r.platform,
        "runner": r.runner,
        "vllm": None if r.vllm is None else {"version": r.vllm.version, "distribution": r.vllm.distribution},
        "installed_vllm": None
        if inst is None
        else {
            "version": inst.version,
            "distribution": inst.distribution,
            "platform": inst.platform,
            "serves_this_profile": r.vllm is not None,
        },
        "engine_version": {
            "version": r.engine_version,
            "source": r.engine_version_source,
            **(
                {"verified": r.version_verdict.verified, "facts_version": r.version_verdict.facts_version}
                if r.version_verdict
                else {}
            ),
        },
        "adapter": None if r.pack is None else r.pack.name,
        "target": None if r.target is None else r.target.to_json(),
        "drafter": None if r.drafter is None else r.drafter.to_json(),
        "plan": None if r.plan is None else r.plan.to_json(),
        "memory": _memory_json(r),
    }


def _memory_json(r) -> dict[str, Any] | None:
    """The memory plan (planning/memory.py) as `--json` shows it; None without a plan."""
    if r.plan is None or r.memory is None:
        return None
    m = r.memory
    return {
        "hardware": None
        if m.device is None
        else {"name": m.device.name, "bytes": m.device.bytes, "source": m.device.source},
        "weights_source": m.weights_source or None,
        "unknown": m.unknown,
        "plan": None if m.plan is None else m.plan.to_json(),
        "notes": m.notes,
    }


def preflight_json(pf) -> dict[str, Any]:
    """The preflight as `check --json` and `plan --json` print it: the profile verdict (`ok`,
    `refused_by`, every finding) and what this machine adds (`here`: would `serve` start it here)."""
    v, here = pf.profile_verdict, pf.here_verdict
    head = {
        **v.to_json(),
        "profile": pf.profile.name,
        "findings": [f.to_json() for f in pf.findings],
        "here": {**here.to_json(), "findings": [f.to_json() for f in pf.here]},
    }
    d = pf.deployment
    if d is None:
        return head | {k: x for k, x in engine_json(pf.resolved).items() if k != "profile"}
    from ppspec_cli.planning.pd import name_table

    rows = name_table(d)
    return head | {
        "kv_connector": d.connector_name,
        "roles": {role: {k: x for k, x in engine_json(r).items() if k != "profile"} for role, r in d.roles.items()},
        "kv_layer_names": None
        if rows is None
        else [
            {
                "first": x.first,
                "last": x.last,
                "prefill": list(x.prefill),
                "decode": list(x.decode),
                "mismatch": x.mismatch,
            }
            for x in rows
        ],
    }
