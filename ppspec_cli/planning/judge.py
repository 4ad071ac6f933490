"""Judge: the facts of a run -> one Judgment, purely. Every rule source runs in the one guard
(findings.guard): the core and pack rules and the drafter contracts over each engine (planning/
rules.py), the P/D rules over a disaggregated profile's two engines (planning/pd.py), the `here`
rules over what this machine adds (planning/here.py). Two verdicts come of it (planning/verdict.py):
the profile's, on what it declares, and here's, on this machine now.

When the installed engine answered (check --probes: its behaviour probes and its parser's option
names), its answers join the profile's findings: it is the engine that serves the profile. For
`serve`, its parser's names are a `here` answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ppspec_cli.findings import Finding, by_severity, guard
from ppspec_cli.findings.codes import PROBES_NOT_RUN, VLLM_PROBED, VLLM_UNVERIFIED
from ppspec_cli.planning.engine_options import unknown_options
from ppspec_cli.planning.facts import Facts
from ppspec_cli.planning.here import run_here_rules
from ppspec_cli.planning.pd import Deployment, role_profile, run_pd_rules
from ppspec_cli.planning.profile import ROLES, Profile, Role
from ppspec_cli.planning.resolve import Resolved, resolve
from ppspec_cli.planning.rules import run_rules
from ppspec_cli.planning.verdict import Question, Verdict, verdict


@dataclass(frozen=True)
class Judgment:
    """The findings and both verdicts of one profile. `resolved`: one engine's facts, or the
    disaggregated deployment's (`deployment`, with `resolved` None). `findings`: the profile
    question's; `here`: what this machine adds (the `here` question reads both)."""

    profile: Profile
    resolved: Resolved | None
    deployment: Deployment | None
    findings: tuple[Finding, ...]
    here: tuple[Finding, ...]
    profile_verdict: Verdict
    here_verdict: Verdict

    def verdict(self, question: Question) -> Verdict:
        return self.here_verdict if question == "here" else self.profile_verdict

    @property
    def engines(self) -> list[Resolved]:
        """The resolved engine(s): one, or each role's."""
        if self.deployment is not None:
            return list(self.deployment.roles.values())
        assert self.resolved is not None
        return [self.resolved]


def _made(profile: Profile, resolved: Any, deployment: Any, findings: list[Finding], here: list[Finding]) -> Judgment:
    f, h = tuple(by_severity(findings)), tuple(by_severity(here))
    return Judgment(profile, resolved, deployment, f, h, verdict(f, "profile"), verdict(f + h, "here"))


def judge(facts: Facts, *, role: Role | None = None, profile: Profile | None = None) -> Judgment:
    """The judgment of `profile` (default: the facts' profile) on the facts. A disaggregated
    profile's engines are judged together; `role` names the one this node places (without it both
    take the command line's placement)."""
    prof = profile if profile is not None else facts.profile
    if prof.disaggregated:
        roles = {x: resolve(role_profile(prof, x), facts, placed=role in (None, x)) for x in ROLES}
        d = Deployment(prof, roles)
        findings: list[Finding] = []
        with guard(findings, "the P/D rules"):
            findings = run_pd_rules(d)
        return _made(prof, None, d, findings, _once([f for r in roles.values() for f in run_here_rules(r, facts)]))
    r = resolve(prof, facts)
    findings = run_rules(r)
    if facts.probe_findings is not None and r.vllm is not None:
        answered = [*facts.probe_findings]
        with guard(answered, "the engine option names"):
            answered += unknown_options(r.options, facts.option_names)
        findings = settled_by_probes(r, findings, answered) + answered
    elif r.vllm is not None:
        findings.append(
            PROBES_NOT_RUN.at(
                "platform",
                f"vLLM {r.vllm.version}'s behaviour probes and the `engine:` option names were not checked (fast mode)",
                fix="`check --probes` checks both; `ppspec serve` always does",
            )
        )
    return _made(prof, r, None, findings, run_here_rules(r, facts))


def _once(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str]] = set()
    out = []
    for f in findings:
        if (f.code, f.message) not in seen:
            seen.add((f.code, f.message))
            out.append(f)
    return out


def settled_by_probes(r: Resolved, findings: list[Finding], probe_found: list[Finding]) -> list[Finding]:
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
                    f"the installed vLLM {r.engine_version} is not a verified release, but this check read it by value "
                    "(class attributes, tap resolution, partition, patch anchors) and it matches what the profile "
                    "needs",
                )
            )
        elif f.kind.settled_by is not None and f.kind.settled_by not in reported:
            continue  # the probe ran and passed: the engine itself answered
        else:
            out.append(f)
    return out
