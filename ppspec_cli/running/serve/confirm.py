"""Is the ppspec plugin running in every engine process? Read from the plugin status records of the
run (<run_dir>/plugin-status/<pid>.json, kept with the run).

What is confirmed, and how:
- the API server process and the engine core wrote an ok status into the run dir (they run on the
  head node, where `ppspec serve` reads it);
- every worker, on every node, answered the engine core's question through vLLM's own worker RPC
  (collective_rpc): the engine core records the answers in its status (`workers`,
  `workers_confirmed`) and refuses to start when one is missing or not ok. A worker whose import
  of the plugin failed, that vLLM skipped (VLLM_PLUGINS), or whose node lacks ppspec cannot answer.
So a silent path (vLLM only logs a plugin's import error; VLLM_PLUGINS without ppspec; a node
without ppspec) ends the serve with EXIT_UNCONFIRMED instead of an engine serving unpatched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ppspec_cli.errors import EXIT_UNCONFIRMED
from ppspec_cli.running.engine.plugin import read_status_dir

__all__ = ["EXIT_UNCONFIRMED", "unconfirmed"]

#: EXIT_UNCONFIRMED (errors.py): `ppspec serve`'s exit code when the engine started but not every
#: engine process confirmed an ok ppspec plugin status matching the plan (serve stopped it).


def plugin_record(status_dir: Path) -> list[dict[str, Any]]:
    """One line per engine process for a run's record: its role, ranks, pack, patches and result
    (the engine core's entry lists the workers it confirmed)."""
    out = []
    for r in read_status_dir(status_dir):
        rec = {k: r.get(k) for k in ("role", "pid", "rank", "pp_rank", "pack", "vllm", "ok", "error")}
        rec["patches"] = [p.get("patch") for p in r.get("patches") or [] if isinstance(p, dict)]
        if "workers" in r:
            rec["workers"] = r.get("workers")
        out.append(rec)
    return out


def unconfirmed(status_dir: Path) -> str | None:
    """None when the API server, the engine core(s) and (through the engine core) every worker
    confirmed an ok plugin status; otherwise why not, in one line per problem."""
    recs = read_status_dir(status_dir)
    problems = [f"{r.get('role', '?')} process (pid {r.get('pid')}): {r.get('error')}" for r in recs if not r.get("ok")]
    if problems:
        return "; ".join(problems[:8])
    roles: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        roles.setdefault(str(r.get("role")), []).append(r)
    if "api" not in roles:
        problems.append(
            "no ok plugin status from the API server process (the plugin did not run there: its import failed, or "
            "VLLM_PLUGINS left it out)"
        )
    cores = roles.get("engine_core", [])
    if not cores:
        problems.append(
            "no ok plugin status from the engine core (the plugin did not run there, so no worker was asked either)"
        )
    elif not all(c.get("workers_confirmed") for c in cores):
        problems.append("the engine core did not confirm its workers' plugin status")
    return "; ".join(problems) or None
