"""`ppspec check` (and the two-engine report `check`/`plan` share for disaggregated profiles)."""

from __future__ import annotations

import json

from ppspec_cli.commands.common import load, progress, report_json, resolve_profile


def run(profile: str, json_out: bool, offline: bool, probes: bool, min_severity: str = "info") -> int:
    """Preflight one profile; 0 when no error-severity finding, else 1. `min_severity`: the least
    severe findings shown in the table (the verdict and the JSON count all)."""
    from ppspec_cli.commands.render import SEVERITIES
    from ppspec_cli.errors import PpspecError
    from ppspec_cli.planning.rules import run_rules

    if min_severity not in SEVERITIES:
        raise PpspecError(f"--severity {min_severity[:40]!r} is not a severity", where="--severity", fix="use error, warning or info", exit_code=2)
    prof = load(profile)
    if prof.disaggregated:
        return pd_report(prof, profile, offline, json_out, plan=False)
    r = resolve_profile(prof, profile, offline)
    findings = run_rules(r)
    probe_results = probe_findings(r) if probes else []
    if probes:
        from ppspec_cli.planning.engine_options import unknown_engine_options

        probe_results += unknown_engine_options(r.profile.engine)
    if not probes and r.vllm is not None:
        from ppspec_cli.findings import Finding

        probe_results.append(Finding("probes-not-run", "info", "platform", f"vLLM {r.vllm.version}'s behaviour probes and the `engine:` option names were not checked (fast mode)", "`check --probes` checks both; `ppspec serve` always does"))
    if probes and r.vllm is not None:
        findings = settled_by_probes(r, findings, probe_results)
    findings = findings + [p for p in probe_results]
    from ppspec_cli.commands.render import render_check

    if json_out:
        out = report_json(r, findings)
        print(json.dumps(out, indent=2))
    else:
        render_check(r, findings, min_severity=min_severity)
    from ppspec_cli.planning.engine_options import refusals

    return 1 if refusals(findings) else 0  # the verdict `serve --dry-run` and `export` give too


def settled_by_probes(r, findings, probe_results) -> list:
    """An unverified vLLM whose every probe passed was read by value here: its `vllm-unverified`
    warning becomes `vllm-probed` (info), and the unknowns the probes settled (opt-in, last-stage
    embedding) go; a failed probe keeps them and adds its own error."""
    from ppspec_cli.findings import Finding

    failed = [p for p in probe_results if p.severity == "error"]
    settled = {"target-opt-in-unknown": "probe-inner-decoder-opt-in", "embed-last-stage-unknown": "probe-target-embed-last-stage"}
    reported = {p.code for p in probe_results if p.code.startswith("probe-")}  # failed or not run
    out = []
    for f in findings:
        if f.code == "vllm-unverified" and not failed:
            out.append(Finding("vllm-probed", "info", f.field, f"the installed vLLM {r.engine_version} is not a verified release, but this check read it by value (class attributes, tap resolution, partition, patch anchors) and it matches what the profile needs", ""))
        elif f.code in settled and settled[f.code] not in reported:
            continue  # the probe ran and passed: the engine itself answered
        else:
            out.append(f)
    return out


def probe_findings(r) -> list:
    """Engine tripwires as findings, when the probes module and vLLM are available."""
    try:
        from ppspec_cli.running.engine import probes as probes_mod  # noqa: F401
    except ImportError:
        return []
    from ppspec_cli.findings import Finding

    if r.vllm is None:
        return []
    try:
        results = probes_mod.run_probes(
            target_arch=r.target.architectures[0] if r.target and r.target.architectures else None,
            method=r.method,
            num_layers=r.target.num_layers if r.target else None,
            pp=r.pp,
            partition=list(r.plan.partition) if r.plan else None,
            drafter_config=r.drafter_view,
            pack=r.pack,
            family=r.family,
            drafter_has_embed=None if r.drafter is None or r.drafter.tensor_names() is None else any(x.endswith("embed_tokens.weight") for x in r.drafter.tensor_names() or ()),
        )
    except Exception as e:  # noqa: BLE001 - a probe crash is a finding, not a traceback
        return [Finding("probe-crashed", "warning", "platform", f"engine probes could not run: {type(e).__name__}: {e}", "run with --no-probes; report this")]
    out = []
    for p in results:
        status = getattr(p, "status", None)
        name = getattr(p, "name", "?")
        detail = getattr(p, "detail", "")
        if status == "failed":
            sev = getattr(p, "severity", None) or "error"
            out.append(Finding(f"probe-{name}", sev, "platform", f"engine probe {name} failed: {detail}", getattr(p, "fix", "") or ""))
        elif status == "not_run":
            out.append(Finding(f"probe-{name}", "info", "platform", f"engine probe {name} not run: {detail}", ""))
    return out


def pd_report(prof, profile_path: str, offline: bool, json_out: bool, *, plan: bool) -> int:
    """`check` / `plan` of a disaggregated profile: both engines, the KV layer names side by side,
    the cross-engine findings. Exit as the single-engine commands do."""
    from ppspec_cli.planning.pd import name_table, resolve_roles, run_pd_rules
    from ppspec_cli.commands.render import render_pd_check, render_pd_plan

    d = resolve_roles(prof, profile_path=profile_path, offline=offline, progress=progress)
    findings = run_pd_rules(d)
    rows = name_table(d)
    from ppspec_cli.planning.engine_options import refusals

    ok = not refusals(findings)  # the one verdict (engine_options.serve_refuses)
    if json_out:
        out = {
            "ok": ok,
            "profile": d.profile.name,
            "kv_connector": d.connector_name,
            "findings": [f.to_json() for f in findings],
            "roles": {role: {k: v for k, v in report_json(r, []).items() if k not in ("ok", "findings")} for role, r in d.roles.items()},
            "kv_layer_names": None
            if rows is None
            else [{"first": x.first, "last": x.last, "prefill": list(x.prefill), "decode": list(x.decode), "mismatch": x.mismatch} for x in rows],
        }
        print(json.dumps(out, indent=2))
    elif plan:
        render_pd_plan(d, rows, findings)
    else:
        render_pd_check(d, findings)
    if plan:  # as for one engine: 1 without a plan
        return 0 if all(r.plan is not None for r in d.roles.values()) else 1
    return 0 if ok else 1
