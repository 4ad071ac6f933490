"""What this machine's network says about a multi-node launch: its host identity (name + boot id),
what a name resolves to, and the interface and source address of the route to another host.

Everything here reads local state only (getaddrinfo, /proc, `ip -j route get`, `ip -j addr`): no
packet leaves the machine. Every lookup has a deadline and a bounded answer; a lookup that cannot
be made answers None (the callers turn that into a warning, never a guess).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass, field

#: `ip` answers in milliseconds; a hung one must not hang `check` or `serve`.
IP_TIMEOUT_S = 5.0
#: Name resolution (getaddrinfo has no timeout of its own: it runs in a thread with this deadline).
RESOLVE_TIMEOUT_S = 5.0
_IP_MAX_BYTES = 1 << 20
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def host_name() -> str:
    """This machine's host name (what `hostname` prints), limited to 64 printable characters."""
    name = socket.gethostname()[:64]
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in name) or "localhost"


def boot_id() -> str | None:
    """The kernel's id of this boot (Linux), or None: a pid means something only within one boot."""
    try:
        with open(_BOOT_ID, encoding="ascii", errors="replace") as f:
            v = f.read(64).strip()
    except OSError:
        return None
    return v if v and all(c in "0123456789abcdef-" for c in v) else None


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def resolve(host: str, timeout_s: float = RESOLVE_TIMEOUT_S) -> list[str] | None:
    """The addresses `host` resolves to here (getaddrinfo order, IPv4 and IPv6), [] when it does not
    resolve, None when the lookup did not finish within the deadline."""
    try:
        ipaddress.ip_address(host)
        return [host]
    except ValueError:
        pass
    out: dict[str, list[str] | None] = {"v": None}

    def look() -> None:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError, ValueError):
            out["v"] = []
            return
        seen: list[str] = []
        for info in infos:
            a = str(info[4][0])
            if a not in seen:
                seen.append(a)
        out["v"] = seen

    t = threading.Thread(target=look, daemon=True, name="ppspec-resolve")
    t.start()
    t.join(timeout_s)
    return out["v"]


def _ip_json(*args: str) -> list | None:
    ip = shutil.which("ip") or next(
        (p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip") if os.path.exists(p)), None
    )
    if ip is None:
        return None
    try:
        p = subprocess.run(
            [ip, "-j", *args], capture_output=True, timeout=IP_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL
        )  # fixed argv, no shell
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return []
    try:
        v = json.loads(p.stdout[:_IP_MAX_BYTES].decode("utf-8", "replace") or "[]")
    except ValueError:
        return None
    return v if isinstance(v, list) else None


@dataclass
class Route:
    dev: str  # the interface packets to the address leave by ("lo" for an address of this machine)
    src: str | None  # the source address this machine uses towards it
    local: bool  # the address is one of this machine's own


def route_to(addr: str) -> Route | None:
    """`ip route get ADDR`: the interface and source address towards `addr`; None when there is no
    route (or `ip` is unavailable)."""
    got = _ip_json("route", "get", addr)
    if not got or not isinstance(got[0], dict) or not isinstance(got[0].get("dev"), str):
        return None
    r = got[0]
    src = r.get("prefsrc") if isinstance(r.get("prefsrc"), str) else None
    return Route(dev=r["dev"][:32], src=src, local=r.get("type") == "local")


@dataclass
class Interface:
    name: str
    up: bool
    addrs: list[str] = field(default_factory=list)  # global-scope IPv4/IPv6 addresses


def interfaces() -> list[Interface] | None:
    """The machine's interfaces with their global addresses (`ip -j addr show`), None if unknown."""
    got = _ip_json("addr", "show")
    if got is None:
        return None
    out = []
    for i in got:
        if not isinstance(i, dict) or not isinstance(i.get("ifname"), str):
            continue
        addrs = [
            a["local"]
            for a in i.get("addr_info") or []
            if isinstance(a, dict) and a.get("scope") == "global" and isinstance(a.get("local"), str)
        ]
        flags = i.get("flags") if isinstance(i.get("flags"), list) else []
        out.append(Interface(i["ifname"][:32], "UP" in flags and "LOOPBACK" not in flags, addrs))
    return out


@dataclass
class NodeNet:
    """The interface and address a node uses for vLLM's process groups, or why none was chosen."""

    ifname: str | None
    addr: str | None
    how: str  # one line: how they were chosen (shown in `serve --dry-run` and progress)
    problems: list[str] = field(default_factory=list)  # why the head may be unreachable from here


def pick(head: str, *, is_head: bool) -> NodeNet:
    """This node's interface and address towards the head `head` (its address or name, as vLLM gets
    it). A worker takes the route to the head. On the head the route ends in `lo`: it takes the
    interface that carries the head's address, or, when the head's name resolves to loopback here
    (a stock /etc/hosts maps the host's own name to 127.0.1.1), its only interface that is up with
    a global address (else the default route's)."""
    addrs = resolve(head)
    if addrs is None:
        return NodeNet(
            None,
            None,
            f"the head {head} did not resolve within {RESOLVE_TIMEOUT_S:.0f}s",
            [f"the head's name {head} did not resolve within {RESOLVE_TIMEOUT_S:.0f}s here"],
        )
    if not addrs:
        return NodeNet(
            None,
            None,
            f"the head {head} does not resolve here",
            [f"the head's name {head} does not resolve on this host"],
        )
    usable = [a for a in addrs if not is_loopback(a)]
    return _towards(head, usable, is_head) if usable else _loopback_head(head, addrs, is_head)


def _loopback_head(head: str, addrs: list[str], is_head: bool) -> NodeNet:
    """The head's name resolves to loopback only: fine on the head itself (its own interface is
    taken), a dead end on a worker."""
    if True:
        if not is_head:
            return NodeNet(
                None,
                None,
                f"the head {head} resolves to loopback ({addrs[0]}) here",
                [
                    f"the head {head} resolves to the loopback address {addrs[0]} on this host: the other nodes are "
                    "not reachable that way"
                ],
            )
        return _own_interface(f"the head's name {head} resolves to loopback ({addrs[0]}) here")


def _towards(head: str, usable: list[str], is_head: bool) -> NodeNet:
    """The first of the head's addresses a route leaves this host towards (its interface and source
    address), or, on the head, the interface that carries it; else why none does."""
    problems: list[str] = []
    for a in usable:
        r = route_to(a)
        if r is None:
            problems.append(f"no route to the head {head} ({a}) from this host")
            continue
        if r.local:
            ifs = interfaces() or []
            owner = next((i for i in ifs if a in i.addrs), None)
            if owner is None:
                return NodeNet(None, a, f"{a} is this host's, on no interface `ip addr` lists", problems)
            return NodeNet(
                owner.name, a, f"{owner.name} carries the head's address {a} (this host is the head)", problems
            )
        if r.dev == "lo" or (r.src and is_loopback(r.src)):
            problems.append(f"the route to the head {head} ({a}) goes through loopback here")
            continue
        shown = head if a == head else f"{head} ({a})"
        return NodeNet(
            r.dev, r.src, f"the route to the head {shown} leaves by {r.dev}, source {r.src or 'unknown'}", problems
        )
    if is_head:
        return _own_interface(problems[0] if problems else f"no usable route to {head}", problems)
    return NodeNet(None, None, problems[0] if problems else f"no usable route to {head}", problems)


def _own_interface(why: str, problems: list[str] | None = None) -> NodeNet:
    ifs = interfaces()
    if ifs is None:
        return NodeNet(None, None, f"{why}; `ip` is not available to list the interfaces", list(problems or []))
    up = [i for i in ifs if i.up and i.addrs]
    if len(up) == 1:
        return NodeNet(
            up[0].name,
            up[0].addrs[0],
            f"{why}; {up[0].name} is the only interface up with an address",
            list(problems or []),
        )
    routes = _ip_json("route", "show", "default") or []
    dev = next((r.get("dev") for r in routes if isinstance(r, dict) and isinstance(r.get("dev"), str)), None)
    owner = next((i for i in up if i.name == dev), None)
    if owner is not None:
        return NodeNet(owner.name, owner.addrs[0], f"{why}; {owner.name} holds the default route", list(problems or []))
    names = ", ".join(i.name for i in up) or "none"
    return NodeNet(
        None,
        None,
        f"{why}; cannot tell which interface the other nodes reach (up with an address: {names})",
        list(problems or []),
    )
