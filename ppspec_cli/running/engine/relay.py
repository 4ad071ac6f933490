"""Building blocks for packs that teach a vLLM model family to relay EAGLE3-family taps over PP,
and the stage-split simulation that proves a relay is right.

Imported only inside an engine process (or a test) where vLLM is importable: by pack patch modules
and by the plugin once it is active.

vLLM's convention, which every relaying forward here follows exactly (vLLM 0.30+ LlamaModel and
EagleModelMixin): tap L is the residual stream after layer L-1 (hidden + residual); tap 0 is the
embeddings, captured on the first stage only. A stage holding layers [start, end) captures taps
start < L <= end; a tap on a boundary (L == start) belongs to the previous stage. Captured taps go
downstream in IntermediateTensors under `aux_hidden_states_<slot>` where the slot is the tap's
position in the sorted tap set (pack_local_aux_hidden_states); middle stages forward upstream
slots unchanged (the V2 runner's PPHandler does that), and the last stage puts upstream slots
before its own (collect_remote_aux_hidden_states).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from types import SimpleNamespace
from typing import Any, Callable, Iterator

from vllm.distributed import parallel_state as _ps

from ppspec_cli.knowledge import methods
from ppspec_cli.planning.plan import stage_bounds
from ppspec_cli.running.engine.patching import Patch

# ---------------------------------------------------------------------------------------------
# Pieces a relaying forward uses


def pp_group() -> Any:
    """vLLM's PP group coordinator, looked up at call time (simulations swap it)."""
    return _ps.get_pp_group()


def stage_output(hidden_states: Any, residual: Any, aux: dict[str, Any]) -> Any:
    """What a non-last stage hands to the next one: the residual stream plus its own taps."""
    from vllm.sequence import IntermediateTensors

    return IntermediateTensors({"hidden_states": hidden_states, "residual": residual, **aux})


class OptInWhereRelayed:
    """Class attribute for `supports_aux_hidden_states_over_pp` that answers True only on classes
    whose `forward` is the relaying one. A subclass that overrides `forward` (e.g. a multimodal
    variant with its own loop) does not silently inherit an opt-in it cannot honour."""

    def __init__(self, forward: Callable[..., Any]):
        self.forward = forward

    def __get__(self, obj: Any, owner: type | None = None) -> bool:
        owner = owner if owner is not None else type(obj)
        return getattr(owner, "forward", None) is self.forward

    def __repr__(self) -> str:
        return f"<ppspec opt-in where forward is {self.forward.__module__}.{self.forward.__qualname__}>"


def check_opt_in(cls: type) -> bool:
    """Behaviour check for OptInWhereRelayed: True on the class, False on a subclass that
    replaces forward."""
    if getattr(cls, "supports_aux_hidden_states_over_pp", False) is not True:
        raise AssertionError(f"{cls.__name__}.supports_aux_hidden_states_over_pp is not True")
    other = type("_PpspecOverridesForward", (), {"forward": lambda self: None})
    other.supports_aux_hidden_states_over_pp = cls.__dict__["supports_aux_hidden_states_over_pp"]
    if other.supports_aux_hidden_states_over_pp is not False:
        raise AssertionError("the opt-in leaks to a class with a different forward")
    return True


# ---------------------------------------------------------------------------------------------
# The relaying forward of a standard decoder (and the patches that install it)

#: The EagleModelMixin behaviour the relaying forward calls into.
MIXIN = (
    "_maybe_add_hidden_state",
    "pack_local_aux_hidden_states",
    "collect_remote_aux_hidden_states",
    "_set_aux_hidden_state_layers",
)


def relayed_forward(
    self: Any,
    input_ids: Any,
    positions: Any,
    intermediate_tensors: Any = None,
    inputs_embeds: Any = None,
) -> Any:
    """The forward of a standard vLLM inner decoder (embed_input_ids, `layers[i](positions,
    hidden_states, residual)`, `norm(hidden_states, residual)`; e.g. Qwen3MoeModel, MiniMaxM2Model),
    with tap relay over PP in vLLM's convention: tap L after layer L-1 (global index), tap 0 on the
    first stage only, this stage's taps packed for the next one, upstream taps first on the last."""
    group = pp_group()
    if group.is_first_rank:
        hidden_states = inputs_embeds if inputs_embeds is not None else self.embed_input_ids(input_ids)
        residual = None
    else:
        assert intermediate_tensors is not None
        hidden_states = intermediate_tensors["hidden_states"]
        residual = intermediate_tensors["residual"]

    upstream = self.collect_remote_aux_hidden_states(intermediate_tensors)
    own: list[Any] = []
    if group.is_first_rank:
        # Tap 0 (the embeddings) exists only on the first stage; elsewhere the start tap is the
        # previous stage's last one.
        self._maybe_add_hidden_state(own, self.start_layer, hidden_states, residual)
    for idx in range(self.start_layer, self.end_layer):
        hidden_states, residual = self.layers[idx](positions, hidden_states, residual)
        self._maybe_add_hidden_state(own, idx + 1, hidden_states, residual)

    if not group.is_last_rank:
        return stage_output(hidden_states, residual, self.pack_local_aux_hidden_states(own))

    hidden_states, _ = self.norm(hidden_states, residual)
    taps = upstream + own
    if taps:
        return hidden_states, taps
    return hidden_states


#: The leading parameters of the standard decoder forward the relaying one replaces (the anchor).
FORWARD_PARAMS = ("input_ids", "positions", "intermediate_tensors", "inputs_embeds")


def natively_relays(cls: type) -> str | None:
    """The installed vLLM opts the class in itself (a plain True on the class or a base, not ppspec's
    opt-in): it relays taps natively, so the relay patches stand aside."""
    for klass in cls.__mro__:
        v = vars(klass).get("supports_aux_hidden_states_over_pp")
        if v is None:
            continue
        if v is True:
            return f"{klass.__module__}:{klass.__qualname__} sets supports_aux_hidden_states_over_pp = True"
        return None
    return None


def natively_builds_target_embed(cls: type) -> str | None:
    """The installed vLLM's constructor already builds a real embed_tokens on the last stage when
    the drafter needs it (knowledge.engine.builds_embed_on_last_stage, by value)."""
    from ppspec_cli.knowledge.engine import builds_embed_on_last_stage

    if builds_embed_on_last_stage(cls) is True:
        return f"{cls.__module__}:{cls.__qualname__} builds embed_tokens on the last stage when the drafter needs it"
    return None


def standard_relay_patches(module: str, cls: str) -> list[Patch]:
    """The three patches that teach a standard inner decoder class to relay taps over PP: the
    relaying forward, the opt-in (only where that forward runs), and a real embed_tokens on the last
    stage when the drafter needs the target's. Each stands aside where the installed vLLM already
    does what it adds (a fork or a later release that opted the family in)."""
    return [
        Patch(
            name="relay_forward",
            module=module,
            target=cls,
            attrs={"forward": relayed_forward},
            description="forward relays taps between PP stages (vLLM's convention)",
            requires=("forward", "embed_input_ids", *MIXIN),
            expects={"forward": ("self", *FORWARD_PARAMS)},
            check=check_relay,
            native=natively_relays,
        ),
        Patch(
            name="opt_in",
            module=module,
            target=cls,
            attrs={"supports_aux_hidden_states_over_pp": OptInWhereRelayed(relayed_forward)},
            description="supports_aux_hidden_states_over_pp = True where the relaying forward runs",
            requires=("supports_aux_hidden_states_over_pp",),
            check=check_opt_in,
            native=natively_relays,
        ),
        Patch(
            name="target_embed_on_last_stage",
            module=module,
            target=cls,
            attrs=lambda orig: {"__init__": init_with_target_embed(orig["__init__"])},
            description="real embed_tokens on the last stage when the drafter needs the target's",
            check=check_target_embed_rule,
            native=natively_builds_target_embed,
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Observations (the plugin's in-engine tripwires subscribe here)

_observers: list[Callable[[str, dict[str, Any]], None]] = []
_quiet = threading.local()


def add_observer(fn: Callable[[str, dict[str, Any]], None]) -> None:
    if fn not in _observers:
        _observers.append(fn)


def remove_observer(fn: Callable[[str, dict[str, Any]], None]) -> None:
    if fn in _observers:
        _observers.remove(fn)


def observe(kind: str, data: dict[str, Any]) -> None:
    """Tell subscribers what the engine just decided (taps set, draft layer numbering). A
    subscriber may raise to refuse the engine. Silent while a simulation runs."""
    if getattr(_quiet, "on", False):
        return
    for fn in list(_observers):
        fn(kind, data)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    prev = getattr(_quiet, "on", False)
    _quiet.on = True
    try:
        yield
    finally:
        _quiet.on = prev


def watch_tap_setter(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap EagleModelMixin._set_aux_hidden_state_layers: run it, then report the tap set and the
    stage's layer range as the engine will use them."""

    @functools.wraps(orig)
    def _set_aux_hidden_state_layers(self: Any, layers: tuple[int, ...]) -> None:
        orig(self, layers)
        observe(
            "taps",
            {
                "taps": [int(x) for x in getattr(self, "aux_hidden_state_layers", ())],
                "start_layer": getattr(self, "start_layer", None),
                "end_layer": getattr(self, "end_layer", None),
                "decoder": type(self).__name__,
            },
        )

    _set_aux_hidden_state_layers.ppspec_original = orig  # type: ignore[attr-defined]
    return _set_aux_hidden_state_layers


# ---------------------------------------------------------------------------------------------
# Target embedding on the last stage


def needs_target_embed(vllm_config: Any) -> bool:
    """vLLM's own rule (spec_decode_needs_target_embed): last stage of PP>1 with a drafter that
    shares the target's input embedding."""
    from vllm.model_executor.models.utils import spec_decode_needs_target_embed

    return bool(spec_decode_needs_target_embed(vllm_config))


def ensure_target_embed(model: Any, vllm_config: Any, prefix: str) -> bool:
    """Give the last stage a real embed_tokens where the constructor left a PPMissingLayer and the
    drafter needs the target's embedding. The checkpoint's embedding then loads into it like on the
    first stage. Returns True when it built one."""
    from vllm.model_executor.models.utils import PPMissingLayer

    if not isinstance(getattr(model, "embed_tokens", None), PPMissingLayer):
        return False
    if vllm_config is None:
        vllm_config = getattr(model, "vllm_config", None)
    if vllm_config is None:
        from vllm.config import get_current_vllm_config

        vllm_config = get_current_vllm_config()
    if not needs_target_embed(vllm_config):
        return False
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    model.embed_tokens = VocabParallelEmbedding(
        model.config.vocab_size,
        model.config.hidden_size,
        quant_config=getattr(vllm_config, "quant_config", None),
        prefix=f"{prefix}.embed_tokens" if prefix else "embed_tokens",
    )
    return True


def init_with_target_embed(orig_init: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an inner decoder's __init__: build it as vLLM does, then ensure_target_embed."""

    @functools.wraps(orig_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        ensure_target_embed(self, kwargs.get("vllm_config"), kwargs.get("prefix", "") or "")

    __init__.ppspec_original = orig_init  # type: ignore[attr-defined]
    __init__.ppspec_target_embed = True  # type: ignore[attr-defined]
    return __init__


def _speculative_config(*, hidden_state_drafter: bool) -> Any:
    """The `vllm_config` vLLM's `spec_decode_needs_target_embed` reads, for an EAGLE3 drafter
    without an embedding of its own (hidden_state_drafter=True) or for ngram (False), in the terms
    of every release 0.30-0.34:

    - 0.30-0.33 read the method name (eagle, eagle3, dflash, dspark; 0.33's `include_mtp` adds mtp);
    - 0.34 reads `speculative_config.uses_target_hidden_states` (the method's SpeculatorConfig:
      True for eagle/eagle3/mtp/dflash/dspark, False for ngram) and
      `speculative_config.draft_model_config.may_use_target_embed` (the drafter class declares
      `has_own_embed_tokens`: it may share the target's embedding).

    A release that reads anything else fails the check (AttributeError) instead of passing it."""
    method = methods.EAGLE3.name if hidden_state_drafter else "ngram"
    return SimpleNamespace(
        speculative_config=SimpleNamespace(
            method=method,
            uses_target_hidden_states=hidden_state_drafter,
            draft_model_config=SimpleNamespace(may_use_target_embed=hidden_state_drafter),
        )
    )


def check_target_embed_rule(_cls: Any = None) -> bool:
    """Behaviour check: the decision the __init__ wrapper relies on is vLLM's, evaluated here on a
    tiny config for the first and the last stage of PP=2: an EAGLE3 drafter that shares the
    target's embedding needs it on the last stage only; ngram (no drafter model) never does."""
    spec, ngram = _speculative_config(hidden_state_drafter=True), _speculative_config(hidden_state_drafter=False)
    with simulated_pp(1, 2):
        last = needs_target_embed(spec)
        last_ngram = needs_target_embed(ngram)
    with simulated_pp(0, 2):
        first = needs_target_embed(spec)
    if not (last is True and first is False and last_ngram is False):
        raise AssertionError(
            f"spec_decode_needs_target_embed gave last={last}, first={first}, ngram on the last stage={last_ngram}; "
            "expected True, False, False"
        )
    return True


# ---------------------------------------------------------------------------------------------
# Global draft layer numbering (EAGLE-1 drafters)


@contextlib.contextmanager
def _layer_count_is_total(model_config: Any) -> Iterator[int]:
    """While a drafter is built, make the target config's `get_num_layers(parallel_config)` answer
    the total depth instead of this stage's count, on this one config object only."""
    total = int(model_config.get_total_num_hidden_layers())
    had_own = "get_num_layers" in getattr(model_config, "__dict__", {})
    if had_own:
        raise RuntimeError("model_config already shadows get_num_layers")
    object.__setattr__(model_config, "get_num_layers", lambda *_a, **_k: total)
    try:
        yield total
    finally:
        object.__delattr__(model_config, "get_num_layers")


def init_with_global_draft_numbering(orig_init: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an EAGLE-1 drafter's __init__ so its layers are named from the target's total depth
    (num_hidden_layers + i), as vLLM's EAGLE3/DFlash/DSpark drafters do, not from the PP-local count."""

    @functools.wraps(orig_init)
    def __init__(self: Any, *args: Any, vllm_config: Any, prefix: str = "", **kwargs: Any) -> None:
        with _layer_count_is_total(vllm_config.model_config) as total:
            orig_init(self, *args, vllm_config=vllm_config, prefix=prefix, **kwargs)
        observe("draft_layers", {"draft_layer_start": total, "drafter": type(self).__name__})

    __init__.ppspec_original = orig_init  # type: ignore[attr-defined]
    return __init__


def _init_reads(fn: Any) -> set[str]:
    """The attribute and global names a constructor's own code reads (through functools.wraps)."""
    import inspect

    code = getattr(inspect.unwrap(fn), "__code__", None) if fn is not None else None
    return set(code.co_names) if code is not None else set()


def natively_numbers_globally(cls: type) -> str | None:
    """The drafter's own constructor numbers its layers from the target's total depth
    (`get_total_num_hidden_layers`) and no longer reads the stage's count: the installed vLLM
    already does what the numbering patch adds."""
    reads = _init_reads(vars(cls).get("__init__"))
    if "get_total_num_hidden_layers" in reads and "get_num_layers" not in reads:
        return f"{cls.__module__}:{cls.__qualname__}.__init__ numbers its layers from get_total_num_hidden_layers"
    return None


def check_global_numbering(cls: type) -> bool:
    """Behaviour check: the installed __init__ is our wrapper around the drafter's own, which reads
    the stage's layer count (`model_config.get_num_layers`, the one answer the wrapper changes: a
    constructor that no longer reads it would leave the wrapper doing nothing), and the wrapper
    makes `get_num_layers` answer the total depth during construction only."""
    init = cls.__dict__.get("__init__")
    if getattr(init, "ppspec_original", None) is None:
        raise AssertionError(f"{cls.__name__}.__init__ is not the ppspec wrapper")
    if "get_num_layers" not in _init_reads(init.ppspec_original):
        raise AssertionError(
            f"{cls.__name__}.__init__ no longer reads model_config.get_num_layers: the numbering wrapper would change "
            "nothing"
        )
    seen: list[int] = []

    def fake_init(self: Any, *, vllm_config: Any, prefix: str = "") -> None:
        seen.append(vllm_config.model_config.get_num_layers(vllm_config.parallel_config))

    fake_model_config = type(
        "_FakeModelConfig", (), {"get_num_layers": lambda self, pc: 3, "get_total_num_hidden_layers": lambda self: 6}
    )
    mc = fake_model_config()
    cfg = SimpleNamespace(model_config=mc, parallel_config=None)
    with quiet():
        init_with_global_draft_numbering(fake_init)(object(), vllm_config=cfg, prefix="")
    if seen != [6] or mc.get_num_layers(None) != 3:
        raise AssertionError(
            f"draft numbering start {seen}, after construction {mc.get_num_layers(None)}; expected [6], 3"
        )
    return True


# ---------------------------------------------------------------------------------------------
# Stage-split simulation


class FakePPGroup:
    """Just what model code asks a PP group coordinator."""

    def __init__(self, rank: int, world: int):
        self.rank_in_group = rank
        self.world_size = world

    @property
    def is_first_rank(self) -> bool:
        return self.rank_in_group == 0

    @property
    def is_last_rank(self) -> bool:
        return self.rank_in_group == self.world_size - 1


_SIM_LOCK = threading.RLock()
_UNSET = object()


@contextlib.contextmanager
def simulated_pp(rank: int, world: int, modules: tuple[Any, ...] = ()) -> Iterator[FakePPGroup]:
    """Make `get_pp_group()` answer as stage `rank` of `world` (in vLLM's parallel_state and in the
    given modules that imported the name), with model parallelism "initialized". Restored on exit."""
    group = FakePPGroup(rank, world)
    targets = [_ps, *[m for m in modules if m is not _ps]]
    saved: list[tuple[Any, str, Any]] = []
    with _SIM_LOCK:
        try:
            for m in targets:
                if "get_pp_group" in vars(m):
                    saved.append((m, "get_pp_group", vars(m)["get_pp_group"]))
                    m.get_pp_group = lambda: group
            saved.append((_ps, "model_parallel_is_initialized", vars(_ps)["model_parallel_is_initialized"]))
            _ps.model_parallel_is_initialized = lambda: True
            yield group
        finally:
            for m, name, value in reversed(saved):
                setattr(m, name, value)


def _torch() -> Any:
    import torch

    return torch


def toy_decoder(cls: type, *, num_layers: int = 6, hidden: int = 16, vocab: int = 32, seed: int = 0) -> Any:
    """An instance of a vLLM inner decoder class without running its constructor: random toy
    layers with the residual-stream contract of vLLM decoder layers, a toy embedding and norm.
    Only `forward` and the EagleModelMixin methods of the real class run on it."""
    torch = _torch()
    nn = torch.nn
    gen = torch.Generator().manual_seed(seed)

    class ToyLayer(nn.Module):
        use_sequence_parallel_moe = False

        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(hidden, hidden, generator=gen) / hidden**0.5, requires_grad=False)

        def forward(self, positions: Any, hidden_states: Any, residual: Any, *extra: Any, **kw: Any) -> tuple[Any, Any]:
            residual = hidden_states if residual is None else hidden_states + residual
            return torch.tanh(residual @ self.w), residual

    class ToyNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.rand(hidden, generator=gen) + 0.5, requires_grad=False)

        def forward(self, hidden_states: Any, residual: Any = None) -> tuple[Any, Any]:
            x = hidden_states if residual is None else hidden_states + residual
            return x * self.w, x

    model = cls.__new__(cls)
    nn.Module.__init__(model)
    model.config = SimpleNamespace(hidden_size=hidden, vocab_size=vocab, num_hidden_layers=num_layers)
    model.hidden_size = hidden
    model.vocab_size = vocab
    emb = nn.Embedding(vocab, hidden)
    with torch.no_grad():
        emb.weight.copy_(torch.randn(vocab, hidden, generator=gen))
    model.embed_tokens = emb
    model.layers = nn.ModuleList([ToyLayer() for _ in range(num_layers)])
    model.norm = ToyNorm()
    model.start_layer, model.end_layer = 0, num_layers
    model.aux_hidden_state_layers = ()
    return model


def run_stages(
    model: Any,
    taps: tuple[int, ...] | list[int],
    partition: list[int],
    input_ids: Any,
    positions: Any,
    *,
    modules: tuple[Any, ...] = (),
    relay_between: Callable[[Any, Any, Any], Any] | None = None,
) -> tuple[Any, list[Any]]:
    """Run `model` as `len(partition)` PP stages, one after the other in this process, the way the
    V2 runner does: each stage sets its tap layout (EagleModelMixin), runs the class's forward on
    its layer range, and a middle stage's output gets the upstream slots relayed by vLLM's own
    PPHandler.relay_aux_hidden_states. Returns the last stage's hidden states and its tap list."""
    from vllm.v1.worker.gpu.pp_utils import PPHandler
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import aux_hidden_state_relay_keys

    pp = len(partition)
    received = None
    out: Any = None
    with quiet():
        for rank, (start, end) in enumerate(stage_bounds(list(partition))):
            model.start_layer, model.end_layer = start, end
            with simulated_pp(rank, pp, modules):
                model._set_aux_hidden_state_layers(tuple(taps))
                out = model.forward(input_ids if rank == 0 else None, positions, received)
                if rank < pp - 1:
                    if relay_between is not None:
                        out = relay_between(model, received, out)
                    else:
                        keys = aux_hidden_state_relay_keys(SimpleNamespace(model=model))
                        out = PPHandler.relay_aux_hidden_states(
                            SimpleNamespace(aux_hidden_state_relay_keys=keys), received, out
                        )
                    received = out
    if isinstance(out, tuple):
        return out[0], list(out[1])
    return out, []


def compare_split(
    cls: type,
    taps: tuple[int, ...],
    partition: list[int],
    *,
    num_layers: int,
    modules: tuple[Any, ...] = (),
    seed: int = 0,
    hidden: int = 16,
) -> str | None:
    """Unsplit run vs `partition` run of the same toy model: None when the taps (and the final
    hidden states) are the same tensors in the same order, else what differs."""
    import sys

    torch = _torch()
    # The class's own module may have imported get_pp_group by name (vLLM's original forwards do).
    modules = (*modules, *[m for m in (sys.modules.get(cls.__module__),) if m is not None])
    model = toy_decoder(cls, num_layers=num_layers, seed=seed, hidden=hidden)
    ids = torch.tensor([1, 5, 7, 2, 9])
    pos = torch.arange(ids.numel())
    ref_h, ref_taps = run_stages(model, taps, [num_layers], ids, pos, modules=modules)
    got_h, got_taps = run_stages(model, taps, partition, ids, pos, modules=modules)
    expect = len(set(taps))
    if len(ref_taps) != expect:
        return f"unsplit run produced {len(ref_taps)} taps, expected {expect}"
    if len(got_taps) != len(ref_taps):
        return f"split {partition} produced {len(got_taps)} taps, unsplit {len(ref_taps)}"
    for i, (a, b) in enumerate(zip(ref_taps, got_taps)):
        if not torch.equal(a, b):
            return f"split {partition}: tap slot {i} (tap {sorted(set(taps))[i]}) differs from the unsplit run"
    if not torch.equal(ref_h, got_h):
        return f"split {partition}: final hidden states differ from the unsplit run"
    return None


#: Splits and taps the runtime check uses: tap 0, taps on stage boundaries, the last layer.
CHECK_CASES: tuple[tuple[tuple[int, ...], list[int]], ...] = (
    ((0, 2, 3, 6), [3, 3]),
    ((0, 2, 3, 6), [2, 2, 2]),
    ((1, 2, 5, 6), [1, 4, 1]),
    ((3,), [3, 3]),
)


def check_relay(cls: type, *, modules: tuple[Any, ...] = ()) -> bool:
    """Behaviour check for a relaying forward: simulated stage splits give the unsplit taps."""
    for taps, partition in CHECK_CASES:
        problem = compare_split(cls, taps, partition, num_layers=sum(partition), modules=modules)
        if problem:
            raise AssertionError(f"{cls.__name__}: {problem}")
    return True
