"""The fixed, versioned prompt set verify sends.

Acceptance numbers are only comparable across runs that sent the same prompts with the same
settings, so the set ships with the package, carries a `version`, and every report records the
sha256 of its content; gates refuse to compare reports whose hashes differ.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio

DEFAULT_SET = "v1.json"
MAX_PROMPT_SET_BYTES = 8 << 20
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class PromptItem:
    id: str
    kind: str  # "general" | "arithmetic"
    prompt: str  # the text sent to /v1/completions
    answer: int | None = None  # exact answer for arithmetic items


@dataclass(frozen=True)
class PromptSet:
    name: str
    version: str
    sha256: str
    items: tuple[PromptItem, ...]
    source: str

    def select(self, num_prompts: int | None) -> tuple[PromptItem, ...]:
        """The first num_prompts items (all when None); the order in the file is fixed."""
        if num_prompts is None:
            return self.items
        if num_prompts < 1:
            raise PpspecError(
                f"--num-prompts must be at least 1, got {num_prompts}",
                where="--num-prompts",
                fix="pass a positive number or omit it",
            )
        return self.items[:num_prompts]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "size": len(self.items),
            "source": self.source,
        }


def content_sha256(doc: dict) -> str:
    """sha256 of the canonical JSON of the set (key order and whitespace do not matter)."""
    canon = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def _fail(where: str, what: str) -> PpspecError:
    return PpspecError(
        f"invalid prompt set: {what}",
        where=where,
        fix="restore the file from the ppspec package or fix the entry named",
    )


def parse_prompt_set(doc: object, source: str) -> PromptSet:
    """Validate a prompt-set document and render each item's prompt text."""
    if not isinstance(doc, dict):
        raise _fail(source, "top level must be a JSON object")
    name, version, items = doc.get("name"), doc.get("version"), doc.get("prompts")
    if not isinstance(name, str) or not name:
        raise _fail(source, "`name` must be a non-empty string")
    if not isinstance(version, str) or not version:
        raise _fail(source, "`version` must be a non-empty string")
    if not isinstance(items, list) or not items:
        raise _fail(source, "`prompts` must be a non-empty list")
    template = doc.get("arithmetic_template", "Q: {question}\nA:")
    if not isinstance(template, str) or "{question}" not in template:
        raise _fail(source, "`arithmetic_template` must be a string containing {question}")
    seen: set[str] = set()
    out: list[PromptItem] = []
    for i, it in enumerate(items):
        where = f"{source}: prompts[{i}]"
        if not isinstance(it, dict):
            raise _fail(where, "each prompt must be an object")
        pid, kind = it.get("id"), it.get("kind")
        if not isinstance(pid, str) or not _ID.match(pid):
            raise _fail(where, "`id` must be a short identifier")
        if pid in seen:
            raise _fail(where, f"duplicate id {pid!r}")
        seen.add(pid)
        if kind == "general":
            text = it.get("prompt")
            if not isinstance(text, str) or not text:
                raise _fail(where, "`prompt` must be a non-empty string")
            out.append(PromptItem(pid, kind, text))
        elif kind == "arithmetic":
            q, ans = it.get("question"), it.get("answer")
            if not isinstance(q, str) or not q:
                raise _fail(where, "`question` must be a non-empty string")
            if not isinstance(ans, int) or isinstance(ans, bool):
                raise _fail(where, "`answer` must be an integer")
            out.append(PromptItem(pid, kind, template.replace("{question}", q), ans))
        else:
            raise _fail(where, f"`kind` must be 'general' or 'arithmetic', got {kind!r}")
    return PromptSet(name=name, version=version, sha256=content_sha256(doc), items=tuple(out), source=source)


def load_prompt_set(path: str | Path | None = None) -> PromptSet:
    """The built-in set (default) or a JSON file of the same shape."""
    if path is None:
        raw = resources.files(__name__).joinpath(DEFAULT_SET).read_text(encoding="utf-8")
        source = f"builtin:{DEFAULT_SET}"
    else:
        p = Path(path)
        raw = safeio.read_text(p, limit=MAX_PROMPT_SET_BYTES, what="prompt set", fix="pass a readable UTF-8 JSON file")
        source = str(p)
    doc = safeio.parse_json(raw, what="prompt set", where=source, fix="fix the JSON syntax")
    return parse_prompt_set(doc, source)


_ANSWER_IS = re.compile(r"answer is\s*[:=]?\s*\$?\s*(-?\d[\d,]*)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*")


def _to_int(tok: str) -> int | None:
    tok = tok.replace(",", "")
    try:
        return int(tok)
    except ValueError:
        return None


def extract_answer(text: str) -> int | None:
    """The integer a completion gives as its answer.

    First "The answer is N" wins; otherwise the last number before the model starts a new
    question (continuations like "\\n\\nQ: ..." are cut off). None when there is no number.
    """
    m = _ANSWER_IS.search(text)
    if m:
        return _to_int(m.group(1))
    head = re.split(r"\n\s*(?:Q:|Question:)", text, maxsplit=1)[0]
    nums = _NUMBER.findall(head)
    return _to_int(nums[-1]) if nums else None
