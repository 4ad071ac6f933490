"""The built-in verify prompt set: versioned, hashed, and its arithmetic answers exact."""

from __future__ import annotations

import ast
import json
import operator
from importlib import resources

import pytest

from ppspec_cli.errors import PpspecError
from ppspec_cli.verify.prompts import content_sha256, extract_answer, load_prompt_set, parse_prompt_set

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _eval_int(expr: str) -> int:
    """Evaluate + - * // on integers (no eval())."""

    def walk(n):
        if isinstance(n, ast.Expression):
            return walk(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](walk(n.left), walk(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -walk(n.operand)
        raise ValueError(f"unsupported expression {ast.dump(n)}")

    return walk(ast.parse(expr, mode="eval"))


def _raw() -> dict:
    return json.loads(resources.files("ppspec_cli.verify.prompts").joinpath("v1.json").read_text(encoding="utf-8"))


def test_builtin_set_shape():
    ps = load_prompt_set()
    assert ps.version == "1" and ps.name == "ppspec-verify"
    kinds = [it.kind for it in ps.items]
    assert kinds.count("arithmetic") >= 20 and kinds.count("general") >= 10
    assert len({it.id for it in ps.items}) == len(ps.items)
    assert ps.sha256 == content_sha256(_raw())
    assert len(ps.sha256) == 64


def test_arithmetic_answers_match_their_working():
    doc = _raw()
    for p in doc["prompts"]:
        if p["kind"] == "arithmetic":
            assert isinstance(p["answer"], int)
            assert _eval_int(p["working"]) == p["answer"], p["id"]


def test_arithmetic_prompt_is_rendered_from_the_template():
    ps = load_prompt_set()
    a = next(it for it in ps.items if it.kind == "arithmetic")
    assert a.prompt.endswith("\nA:") and "The answer is" in a.prompt
    assert "{question}" not in a.prompt


def test_hash_ignores_formatting_but_not_content():
    doc = _raw()
    reordered = json.loads(json.dumps(doc, sort_keys=True))
    assert content_sha256(reordered) == content_sha256(doc)
    doc["prompts"][0]["prompt"] += " "
    assert content_sha256(doc) != content_sha256(_raw())


def test_select():
    ps = load_prompt_set()
    assert ps.select(None) == ps.items
    assert [it.id for it in ps.select(3)] == [it.id for it in ps.items[:3]]
    with pytest.raises(PpspecError):
        ps.select(0)


@pytest.mark.parametrize(
    "doc,msg",
    [
        ([], "JSON object"),
        ({"name": "x", "version": "1", "prompts": []}, "non-empty list"),
        ({"name": "x", "prompts": [{"id": "a", "kind": "general", "prompt": "p"}]}, "version"),
        ({"name": "x", "version": "1", "prompts": [{"id": "a", "kind": "general", "prompt": "p"}] * 2}, "duplicate"),
        (
            {
                "name": "x",
                "version": "1",
                "prompts": [{"id": "a", "kind": "arithmetic", "question": "q", "answer": "7"}],
            },
            "integer",
        ),
        ({"name": "x", "version": "1", "prompts": [{"id": "a", "kind": "poem", "prompt": "p"}]}, "kind"),
    ],
)
def test_invalid_sets(doc, msg):
    with pytest.raises(PpspecError, match=msg):
        parse_prompt_set(doc, "t.json")


def test_custom_file(tmp_path):
    p = tmp_path / "set.json"
    p.write_text(
        json.dumps(
            {
                "name": "mine",
                "version": "7",
                "arithmetic_template": "{question} =",
                "prompts": [{"id": "q1", "kind": "arithmetic", "question": "2+2", "answer": 4}],
            }
        )
    )
    ps = load_prompt_set(p)
    assert ps.items[0].prompt == "2+2 =" and ps.version == "7"
    p.write_text("{")
    with pytest.raises(PpspecError, match="not valid JSON"):
        load_prompt_set(p)


@pytest.mark.parametrize(
    "text,expected",
    [
        (" 24 + 18 = 42 and 42 - 29 = 13. The answer is 13.", 13),
        (" The answer is 6,000 millilitres.", 6000),
        (" The answer is: -5", -5),
        (" 7 x 12 = 84, 84 - 15 = 69\n\nQ: Another question with 5 apples", 69),
        (" I do not know.", None),
        ("", None),
        (" the answer is $32.", 32),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected
