"""The profile's keys as data: every dotted key with its type, default and description, walked from
the schema (planning/profile.py), for the references `ppspec docs` prints (Markdown for
docs/profile-reference.md, a terminal view, one key with `ppspec docs KEY`) and for "did you mean"
when a profile names a key the schema does not have."""

from __future__ import annotations

import difflib
import inspect
import types
import typing
from dataclasses import dataclass

from pydantic import BaseModel


def type_name(ann) -> str:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [type_name(a) for a in args if a is not type(None)]
        s = " | ".join(parts)
        return s + " (optional)" if type(None) in args else s
    if origin is list or origin is tuple:
        return f"list[{type_name(args[0])}]"
    if origin is dict:
        return f"map[{type_name(args[0])}, {type_name(args[1])}]"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann.__name__
    return getattr(ann, "__name__", str(ann))


def default_text(field) -> str:
    """The default as the reference writes it (Markdown code spans; `**required**`)."""
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        v = field.default_factory()
        return "`{}`" if v == {} else ("see below" if isinstance(v, BaseModel) else f"`{v!r}`")
    if isinstance(field.default, tuple):  # written as a YAML list
        return f"`{list(field.default)!r}`"
    return f"`{field.default!r}`" if field.default is not None else "—"


def models_in(ann, suffix: str = "") -> list[tuple[type[BaseModel], str]]:
    """The sub-models a field holds, directly, optionally or as a mapping's values (`.<key>`)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [(ann, suffix)]
    args = typing.get_args(ann)
    if typing.get_origin(ann) is dict:
        return models_in(args[1], suffix + ".<" + type_name(args[0]).replace("'", "").replace(" ", "") + ">")
    return [m for a in args for m in models_in(a, suffix)]


@dataclass(frozen=True)
class Key:
    key: str  # dotted, as written in a profile (`drafter.taps`; `roles.<str>.engine` for a mapping's values)
    type: str
    default: str  # as default_text writes it
    description: str
    section: str  # the dotted prefix of the model holding it ("" for the top level)


@dataclass(frozen=True)
class Section:
    prefix: str
    model: type[BaseModel]
    doc: str
    keys: tuple[Key, ...]


def sections(root: type[BaseModel]) -> list[Section]:
    """Every model of the schema under `root` (planning.profile.Profile) once, depth first, as
    docs/profile-reference.md orders them."""
    out: list[Section] = []
    seen: set = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        if model in seen:
            return
        seen.add(model)
        keys, subs = [], []
        for name, f in model.model_fields.items():
            dotted = f"{prefix}.{name}" if prefix else name
            keys.append(Key(dotted, type_name(f.annotation), default_text(f), f.description or "", prefix))
            subs += [(m, dotted + suffix) for m, suffix in models_in(f.annotation)]
        out.append(Section(prefix, model, inspect.cleandoc(model.__doc__ or ""), tuple(keys)))
        for m, p in subs:
            walk(m, p)

    walk(root, "")
    return out


def keys(root: type[BaseModel]) -> dict[str, Key]:
    return {k.key: k for s in sections(root) for k in s.keys}


def fields_at(root: type[BaseModel], loc: tuple) -> list[str] | None:
    """The keys the schema under `root` allows beside the last element of a validation error's
    `loc` (the path to an unknown key), or None where the path leaves the models (a free mapping)."""
    model: type[BaseModel] | None = root
    parts = list(loc[:-1])
    while parts:
        if model is None:
            return None
        name = parts.pop(0)
        f = model.model_fields.get(str(name))
        if f is None:
            return None
        subs = models_in(f.annotation)
        if not subs:
            return None
        sub, suffix = subs[0]
        if suffix:  # a mapping's values: the next element is the mapping's key
            if not parts:
                return None
            parts.pop(0)
        model = sub
    return list(model.model_fields) if model is not None else None


def did_you_mean(word: str, candidates: list[str], n: int = 3) -> list[str]:
    """The candidates closest to `word` (difflib's ratio, 0.6 and up), best first."""
    return difflib.get_close_matches(str(word), candidates, n=n, cutoff=0.6)
