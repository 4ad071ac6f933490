"""Patch objects: how ppspec changes a class or module of the installed vLLM, and proves it did.

A `Patch` names its target (`module` + dotted `target` inside it), the attribute(s) it sets, keeps
the originals, applies idempotently, records in a process-wide registry which pack touched what,
refuses a second patch of the same attribute from another patch, can be reverted, and has a
`verify()` that checks *by value* (the attribute vLLM will look up is the object we installed, plus
an optional behaviour check run on a tiny input). Nothing is grepped.

Values are given as a function of the originals, so a replacement can keep and call the method it
replaces: `Patch(..., attrs=lambda orig: {"forward": make_forward(orig["forward"])})`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

_MISSING = object()


class PatchError(RuntimeError):
    """A patch could not be applied, verified or reverted. The message names pack, patch and target."""


class PatchTargetMissing(PatchError):
    """The installed vLLM does not have what the patch expects (a different or changed version)."""


class PatchConflict(PatchError):
    """Another patch already owns an attribute this patch wants to set."""


class PatchAnchorDrift(PatchTargetMissing):
    """The target exists but no longer has the shape the patch was written for (a method's
    parameters changed): the patch refuses, naming itself and what differs."""


class PatchVerifyError(PatchError):
    """The patch was applied but the value check failed."""


@dataclass
class _Record:
    pack: str
    patch: str
    target: str
    attr: str
    own_original: Any  # the target's own __dict__ entry before us, or _MISSING (then it was inherited)
    installed: Any


#: (id(target object), attribute) -> record. One per process.
_REGISTRY: dict[tuple[int, str], _Record] = {}


def registry() -> list[dict[str, str]]:
    """What ppspec patched in this process: pack, patch, target and attribute of every change."""
    return [{"pack": r.pack, "patch": r.patch, "target": r.target, "attr": r.attr} for r in _REGISTRY.values()]


@dataclass
class Patch:
    """One change to one vLLM object (a class or a module).

    name: short id, unique in the pack (e.g. "relay_forward").
    module: module path (e.g. "vllm.model_executor.models.qwen3_moe").
    target: dotted attribute path inside the module ("Qwen3MoeModel"); "" patches the module itself.
    attrs: {attribute: value}, or a function taking a read-only view of the target (`view["forward"]`
        is the current, possibly inherited, value; `view.own(name)` the target's own; `view.target`
        the object) and returning {attribute: value}.
    requires: attributes that must already exist on the target, e.g. the method a replacement calls
        into; their absence means "this is not the vLLM the pack was written for".
    requires_module: attributes that must exist on the module (helpers the replacement uses).
    check: behaviour check run by verify() after the identity check; raise or return False on failure.
    optional: a missing module/target is skipped (recorded as such) instead of refused.
    expects: the anchor's shape: {attribute: leading parameter names} of methods the patch
        replaces or calls; other parameters (a changed signature) are a drift, refused by name.
    native: `native(target)` returns a phrase when the installed vLLM already has what the patch
        adds (e.g. the class opts in itself), else None: the patch is then skipped and reported
        ("vLLM X already does this"), never stacked on the engine's own behaviour.
    """

    name: str
    module: str
    target: str
    attrs: dict[str, Any] | Callable[["_OriginalsView"], dict[str, Any]]
    description: str = ""
    requires: tuple[str, ...] = ()
    requires_module: tuple[str, ...] = ()
    check: Callable[[Any], Any] | None = None
    optional: bool = False
    pack: str = "ppspec"
    expects: dict[str, tuple[str, ...]] = field(default_factory=dict)
    native: Callable[[Any], str | None] | None = None
    # state
    applied: bool = field(default=False, init=False)
    skipped: str | None = field(default=None, init=False)
    native_reason: str | None = field(default=None, init=False)  # set when skipped because vLLM already does it
    _installed: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _target_obj: Any = field(default=None, init=False, repr=False)

    # -- naming ---------------------------------------------------------------------------------

    @property
    def qualname(self) -> str:
        return f"{self.pack}.{self.name}"

    @property
    def target_name(self) -> str:
        return f"{self.module}:{self.target}" if self.target else self.module

    def _fail(self, cls: type[PatchError], what: str) -> PatchError:
        return cls(f"patch {self.qualname} on {self.target_name}: {what}")

    # -- resolution -----------------------------------------------------------------------------

    def resolve(self) -> Any:
        """Import the module and walk to the target; PatchTargetMissing when something is absent."""
        try:
            mod = importlib.import_module(self.module)
        except ImportError as e:
            raise self._fail(PatchTargetMissing, f"module {self.module} cannot be imported ({e})") from None
        for attr in self.requires_module:
            if not hasattr(mod, attr):
                raise self._fail(PatchTargetMissing, f"module {self.module} has no {attr!r}")
        obj: Any = mod
        if self.target:
            for part in self.target.split("."):
                if not hasattr(obj, part):
                    raise self._fail(PatchTargetMissing, f"{self.module} has no {self.target!r}")
                obj = getattr(obj, part)
        for attr in self.requires:
            if not hasattr(obj, attr):
                raise self._fail(PatchTargetMissing, f"{self.target_name} has no attribute {attr!r}")
        return obj

    def check_shape(self, obj: Any) -> None:
        """The anchor's shape (`expects`): PatchAnchorDrift naming what differs."""
        for attr, params in self.expects.items():
            got = _params(getattr(obj, attr, None))
            if got is not None and tuple(got[: len(params)]) != tuple(params):
                raise self._fail(
                    PatchAnchorDrift,
                    f"anchor drifted: {self.target_name}.{attr} takes ({', '.join(got)}), the patch was written for "
                    f"({', '.join(params)}, ...)",
                )

    def anchor(self) -> tuple[str, str]:
        """Read the anchor without changing anything: ("matches", ""), ("native", why) or
        ("drifted", what differs). An optional patch whose target is absent reads "absent"."""
        try:
            obj = self.resolve()
        except PatchTargetMissing as e:
            return ("absent", str(e)) if self.optional else ("drifted", str(e))
        if self.native is not None:
            why = self.native(obj)
            if why:
                return "native", why
        try:
            self.check_shape(obj)
        except PatchAnchorDrift as e:
            return "drifted", str(e)
        return "matches", ""

    def _values(self, obj: Any) -> dict[str, Any]:
        values = self.attrs(_OriginalsView(obj)) if callable(self.attrs) else self.attrs
        if not isinstance(values, dict):
            raise self._fail(PatchError, "attrs factory must return a dict of attribute values")
        return dict(values)

    # -- apply / revert -------------------------------------------------------------------------

    def apply(self) -> bool:
        """Install the values. Idempotent: a second call on an applied patch changes nothing.
        Returns True when something was installed now, False when it already was (or was skipped)."""
        if self.applied:
            return False
        self.skipped = self.native_reason = None
        try:
            obj = self.resolve()
        except PatchTargetMissing as e:
            if self.optional:
                self.skipped = str(e)
                return False
            raise
        if self.native is not None:
            why = self.native(obj)
            if why:
                self.native_reason = why
                self.skipped = f"the installed vLLM already does this: {why}"
                return False
        values = self._values(obj)
        if not values:
            raise self._fail(PatchError, "sets no attributes")
        # Already installed by an earlier, equal Patch object (plugin called twice in one process)?
        same = [_REGISTRY.get((id(obj), a)) for a in values]
        if all(r is not None and r.pack == self.pack and r.patch == self.name for r in same):
            self._target_obj = obj
            self._installed = {a: r.installed for a, r in zip(values, same)}  # type: ignore[union-attr]
            self.applied = True
            return False
        for a, r in zip(values, same):
            if r is not None:
                raise self._fail(
                    PatchConflict,
                    f"attribute {a!r} is already patched by {r.pack}.{r.patch}; two packs must not change the same "
                    "attribute",
                )
        self.check_shape(obj)
        records = [_Record(self.pack, self.name, self.target_name, a, _own(obj, a), v) for a, v in values.items()]
        done = []
        try:
            for rec in records:
                setattr(obj, rec.attr, rec.installed)
                done.append(rec)
        except Exception as e:  # roll back a half-applied patch before reporting
            for rec in reversed(done):
                _restore(obj, rec)
            raise self._fail(PatchError, f"setting {rec.attr!r} failed: {type(e).__name__}: {e}") from None
        for rec in records:
            _REGISTRY[(id(obj), rec.attr)] = rec
        self._target_obj = obj
        self._installed = dict(values)
        self.applied = True
        return True

    def revert(self) -> None:
        """Put the originals back (an inherited attribute is removed again) and forget the records."""
        if not self.applied:
            return
        obj = self._target_obj
        for a in self._installed:
            rec = _REGISTRY.pop((id(obj), a), None)
            if rec is not None:
                _restore(obj, rec)
        self.applied = False
        self._installed = {}
        self._target_obj = None

    # -- verify ---------------------------------------------------------------------------------

    def verify(self) -> None:
        """Prove by value that the patch is in effect; PatchVerifyError otherwise.

        1. Resolve the target again from its module (a reload or a second copy would show here) and
           read each attribute the way vLLM will (normal lookup) — it must be the installed object.
        2. Run the behaviour check, if any, on a tiny input.
        """
        if self.skipped is not None:
            return
        if not self.applied:
            raise self._fail(PatchVerifyError, "not applied")
        try:
            obj = self.resolve()
        except PatchTargetMissing as e:
            raise self._fail(PatchVerifyError, f"target vanished after apply: {e}") from None
        if obj is not self._target_obj:
            raise self._fail(
                PatchVerifyError, "the module now holds a different object than the one patched (module reloaded?)"
            )
        for a, v in self._installed.items():
            if _current(obj, a) is not v:
                raise self._fail(
                    PatchVerifyError, f"attribute {a!r} is not the installed value (overwritten after apply?)"
                )
        if self.check is not None:
            try:
                ok = self.check(obj)
            except Exception as e:  # noqa: BLE001 - any failure of the check is a verify failure
                raise self._fail(PatchVerifyError, f"behaviour check failed: {type(e).__name__}: {e}") from None
            if ok is False:
                raise self._fail(PatchVerifyError, "behaviour check returned False")

    def report(self) -> dict[str, Any]:
        return {
            "patch": self.qualname,
            "target": self.target_name,
            "attrs": sorted(self._installed) if self.applied else [],
            "applied": self.applied,
            "skipped": self.skipped,
            "native": self.native_reason is not None,
            "description": self.description,
        }


class _OriginalsView:
    """What a value factory sees: the target's current attributes (normal lookup, so inherited
    ones too), read-only. `view["forward"]` is the original forward; a missing name gives None."""

    def __init__(self, obj: Any):
        self._obj = obj

    def __getitem__(self, name: str) -> Any:
        return getattr(self._obj, name, None)

    def own(self, name: str) -> Any:
        """The target's own (not inherited) value, or None."""
        return self._obj.__dict__.get(name) if hasattr(self._obj, "__dict__") else None

    @property
    def target(self) -> Any:
        return self._obj


def _params(fn: Any) -> list[str] | None:
    """A callable's parameter names through wrappers (None when it has no readable signature)."""
    import inspect

    if fn is None:
        return None
    try:
        return list(inspect.signature(inspect.unwrap(fn)).parameters)
    except (TypeError, ValueError):
        return None


def _is_slot(obj: Any, attr: str) -> bool:
    """Attributes stored outside the object's __dict__ by a data descriptor of its type
    (e.g. a class's __bases__): they are put back by value, never deleted."""
    if attr in getattr(obj, "__dict__", {}):
        return False
    for klass in type(obj).__mro__:
        d = klass.__dict__.get(attr)
        if d is not None:
            return hasattr(d, "__set__")
    return False


def _own(obj: Any, attr: str) -> Any:
    """What to put back on revert: the target's own value, the slot value, or _MISSING (inherited)."""
    if _is_slot(obj, attr):
        return getattr(obj, attr)
    d = getattr(obj, "__dict__", None)
    return d.get(attr, _MISSING) if d is not None else getattr(obj, attr, _MISSING)


def _current(obj: Any, attr: str) -> Any:
    """The target's own current value of an attribute (not an inherited one)."""
    if _is_slot(obj, attr):
        return getattr(obj, attr, _MISSING)
    d = getattr(obj, "__dict__", None)
    return d.get(attr, _MISSING) if d is not None else getattr(obj, attr, _MISSING)


def _restore(obj: Any, rec: _Record) -> None:
    if rec.own_original is _MISSING:
        try:
            delattr(obj, rec.attr)
        except AttributeError:
            pass
    else:
        setattr(obj, rec.attr, rec.own_original)


def revert_all(patches: list[Patch]) -> None:
    for p in reversed(patches):
        p.revert()
