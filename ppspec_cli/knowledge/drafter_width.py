"""How wide vLLM *builds* an EAGLE3 drafter's `fc` (the projection of the concatenated taps), per
drafter class and vLLM release. The width vLLM builds is not always the number of taps the config
lists, and nothing warns: a checkpoint whose `fc.weight` is wider fails to load, and a tap list
longer than the width fails at the first forward (vLLM #54526).

What each class's constructor reads is the release table's (`fc_taps` of a drafter class, read by
knowledge/drafterscan.py from `fc_input_size = <width> * <count>`): the config keys the tap count
comes from, first set wins (a list counts by its length), the count when none is set, and the keys
of the width. E.g. vLLM's Llama-family class reads `num_aux_hidden_states`, then the *nested*
`eagle_config` list, never the top-level list where speculators-format checkpoints keep theirs
(#54598 would change that).

Nothing here imports vLLM, and no family is named here: the facts are the table's.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple


class BuiltWidth(NamedTuple):
    taps: int  # how many taps the fc is built for
    source: str  # which key (or default) gave it
    served_class: str  # the drafter class vLLM builds
    at: str | None = None  # where the class's constructor sizes it (vLLM's file:line)


def _read(cfg: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = cfg
    for part in dotted.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def _taps(v: Any) -> int | None:
    """A count (positive int) or a non-empty list's length; None when the key gives neither."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v if v > 0 else None
    if isinstance(v, list) and v:
        return len(v)
    return None


def built_fc_taps(cfg: Mapping[str, Any], served_class: str, rule: Mapping[str, Any] | None) -> BuiltWidth | None:
    """How many taps vLLM builds the fc of `served_class` for, by the table's `fc_taps` rule of that
    class. None when the table has no such rule for it, or when no key is set and the class has no
    default (unknown, never guessed)."""
    if not isinstance(rule, Mapping) or not isinstance(rule.get("keys"), list):
        return None
    at = rule.get("at") if isinstance(rule.get("at"), str) else None
    keys = [k for k in rule["keys"] if isinstance(k, str)]
    for key in keys:
        n = _taps(_read(cfg, key))
        if n is not None:
            return BuiltWidth(n, key, served_class, at)
    default = rule.get("default")
    if not (isinstance(default, int) and not isinstance(default, bool) and default > 0):
        return None
    return BuiltWidth(
        default,
        f"vLLM's default ({default}): the config sets none of the keys {served_class} reads ({', '.join(keys)})",
        served_class,
        at,
    )
