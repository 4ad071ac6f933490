"""The validation kit stays out of the wheel (issue 22): the wheel ships ppspec_cli/demo's core
models and no ppspec_kit; every `demo:` name the shipped profiles and the docs give resolves from
the wheel alone, to the same bytes a checkout builds; a kit name reports the known ones there; and
from a checkout the factory finds the kit on its own, so a GPU-validation profile checks (and so
serves) without anything importing ppspec_kit first."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds the wheel and demo models in subprocesses

REPO = Path(__file__).resolve().parent.parent
CORE_DEMO = ("__init__", "common", "factory", "relay", "tiny", "tokenizer")
KIT_DRAFTER = "tiny-qwen3-relay-dflash"  # a GPU-validation model (ppspec_kit.block)
_DEMO_REF = re.compile(r"demo:([a-z0-9][a-z0-9-]*)")


#: The GPU validation's pages and recorded runs: their models are the kit's, run from a checkout.
_GPU_DOCS = ("gpu-validation.md", "gpu-bench-")


def _names_in(files) -> set[str]:
    return {m for f in files for m in _DEMO_REF.findall(f.read_text(encoding="utf-8"))}


def _told_names() -> set[str]:
    """Every `demo:<name>` a user of the wheel is given: the shipped profiles, README.md, docs/
    (but the GPU validation's pages, which run from a checkout)."""
    docs = [
        f
        for f in sorted((REPO / "docs").rglob("*"))
        if f.suffix in (".md", ".yaml") and not f.relative_to(REPO / "docs").as_posix().startswith(_GPU_DOCS)
    ]
    return _names_in([*sorted((REPO / "profiles").glob("*.yaml")), REPO / "README.md", *docs])


def test_the_gpu_pages_name_kit_models():
    """The demo: names the GPU validation's pages and recorded runs use are registered once the kit is."""
    import ppspec_kit  # noqa: F401  (registers the kit's models)
    from ppspec_cli.demo import factory

    gpu = [
        f
        for f in sorted((REPO / "docs").rglob("*"))
        if f.suffix in (".md", ".yaml") and f.relative_to(REPO / "docs").as_posix().startswith(_GPU_DOCS)
    ]
    names = _names_in(gpu)
    assert "llama-8b-planted" in names, "expected the GPU pages to name the 8B planted shape"
    assert sorted(n for n in names if n not in factory._REGISTRY) == []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if importlib.util.find_spec("hatchling") is None:
        pytest.fail("building the wheel offline needs hatchling (in the [test] extra): pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    (whl,) = out.glob("ppspec-*.whl")
    return whl


@pytest.fixture(scope="module")
def site(wheel, tmp_path_factory) -> Path:
    """The wheel unpacked as an install would lay it out (a pure-Python wheel: files as they are)."""
    root = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(root)
    return root


def test_wheel_ships_the_core_demo_and_no_kit(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for mod in CORE_DEMO:
        assert f"ppspec_cli/demo/{mod}.py" in names, f"the wheel lacks ppspec_cli/demo/{mod}.py"
    kit = [n for n in names if "ppspec_kit" in n or n.startswith(("ppspec_cli/demo/gpuval", "ppspec_cli/demo/block"))]
    assert not kit, f"validation-kit files in the wheel: {kit}"
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"ppspec_cli"}, f"the wheel ships top-level entries besides ppspec_cli: {sorted(tops)}"
    assert {f"ppspec_cli/_profiles/{p.name}" for p in (REPO / "profiles").glob("*.yaml")} <= set(names)


# The start of a fresh interpreter on the unpacked wheel: every sys.path entry that holds a
# ppspec_kit (a checkout: the venv's editable install points at one) is dropped before ppspec_cli
# is imported, so neither the checkout's ppspec_cli nor its kit can be found.
_HIDE_CHECKOUT = """
import json, sys
from pathlib import Path
sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "ppspec_kit").exists()]
"""
_WHEEL_ONLY = (
    _HIDE_CHECKOUT
    + """
import importlib.util
import ppspec_cli
from ppspec_cli import demo
from ppspec_cli.errors import PpspecError
names = json.loads(sys.argv[1])
kit = importlib.util.find_spec("ppspec_kit") is not None
report = {"ppspec_cli": ppspec_cli.__file__, "kit_findable": kit, "built": {}}
for n in names:
    report["built"][n] = str(demo.ensure_demo_model(n))
try:
    demo.ensure_demo_model(sys.argv[2])
except PpspecError as e:
    report["error"] = [e.what, e.fix]
report["kit_loaded"] = "ppspec_kit" in sys.modules
print("REPORT " + json.dumps(report))
"""
)


def _digests(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def test_told_names_resolve_from_the_wheel_alone(site, demo_cache, tmp_path):
    names = sorted(_told_names())
    shipped = {m for p in (REPO / "profiles").glob("*.yaml") for m in _DEMO_REF.findall(p.read_text(encoding="utf-8"))}
    assert {
        "tiny-llama",
        "tiny-llama-eagle3",
        "tiny-llama-eagle3-one",
        "tiny-llama-relay",
        "tiny-llama-relay-eagle3",
    } <= shipped
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(site), PPSPEC_CACHE=str(cache), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-c", _WHEEL_ONLY, json.dumps(names), KIT_DRAFTER],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    assert Path(report["ppspec_cli"]).is_relative_to(site), (
        f"ran the checkout's ppspec_cli, not the wheel's: {report['ppspec_cli']}"
    )
    assert report["kit_findable"] is False and report["kit_loaded"] is False
    assert sorted(report["built"]) == names
    for n in names:  # the wheel's builders write what a checkout writes
        assert _digests(Path(report["built"][n])) == _digests(demo_cache / "demo" / n), n
    what, fix = report["error"]
    assert KIT_DRAFTER in what
    assert "demo:tiny-llama-relay-eagle3" in fix and "ppspec_kit" in fix and "checkout" in fix
    assert KIT_DRAFTER not in fix


def _profile(path: Path, drafter: str) -> Path:
    path.write_text(
        "name: kit-dflash\ntarget:\n  model: demo:tiny-llama-relay\n"
        f"drafter:\n  method: dflash\n  model: demo:{drafter}\n  num_speculative_tokens: 2\n"
        "topology:\n  tensor_parallel: 1\n  pipeline_parallel: 1\nplatform: cpu\ndtype: float32\n",
        encoding="utf-8",
    )
    return path


def test_a_kit_name_in_a_wheel_install_is_one_clear_error(site, demo_cache, tmp_path):
    """`ppspec check` from the wheel: the drafter is an unreadable model (an error finding, exit 1)
    naming the unknown name and the known ones; no traceback."""
    prof = _profile(tmp_path / "p.yaml", KIT_DRAFTER)
    code = _HIDE_CHECKOUT + "from ppspec_cli.cli import main\nsys.argv = ['ppspec', 'check', sys.argv[1]]\nmain()\n"
    env = dict(os.environ, PYTHONPATH=str(site), PPSPEC_CACHE=str(demo_cache), HF_HUB_OFFLINE="1", COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, "-c", code, str(prof)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    assert (
        "drafter-unreadable" in out
        and f"unknown demo model '{KIT_DRAFTER}'" in out
        and "demo:tiny-llama-relay-eagle3" in out
        and "ppspec_kit" in out
    )


def test_a_checkout_finds_the_kit_without_being_told(demo_cache, tmp_path):
    """From the repo root, with nothing importing ppspec_kit first, the factory loads it on demand."""
    prof = _profile(tmp_path / "p.yaml", KIT_DRAFTER)
    env = dict(os.environ, PYTHONPATH=str(REPO), PPSPEC_CACHE=str(demo_cache), HF_HUB_OFFLINE="1", COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, "-m", "ppspec_cli.cli", "check", str(prof)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"demo:{KIT_DRAFTER}" in proc.stdout


def test_the_core_imports_no_kit(tmp_path):
    """Importing every command and the demo package leaves ppspec_kit unloaded (it loads only for
    a name the core catalogue does not have)."""
    code = (
        "import sys, ppspec_cli.cli, ppspec_cli.demo, ppspec_cli.commands.serve, ppspec_cli.checkpoint.reader, "
        "ppspec_cli.running.launch\n"
        "from ppspec_cli import demo\ndemo.resolve_model_ref('meta-llama/Llama-3.1-8B')\nprint('KIT', 'ppspec_kit' "
        "in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "KIT False" in proc.stdout


# ------------------------------------------------------------------ the registration API


@pytest.fixture
def registry(monkeypatch, tmp_path):
    """The factory's catalogue as it is, on copies this test may change; a fresh cache."""
    from ppspec_cli.demo import factory

    monkeypatch.setattr(factory, "_REGISTRY", dict(factory._REGISTRY))
    monkeypatch.setattr(factory, "DEMO_MODELS", dict(factory.DEMO_MODELS))
    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path))
    return factory


def _write_config(spec, out: Path) -> None:
    (out / "config.json").write_text(json.dumps({"seed": spec.seed}) + "\n")


def _other_builder(spec, out: Path) -> None:
    (out / "config.json").write_text("{}\n")


def test_a_registered_model_resolves_and_builds(registry, tmp_path):
    from ppspec_cli.demo.common import Spec

    spec = Spec("test", 7, "a test model")
    registry.register_model("kit-test-model", spec, _write_config)
    registry.register_model("kit-test-model", spec, _write_config)  # the same again: a no-op
    assert registry.DEMO_MODELS["kit-test-model"] == "a test model"
    path = Path(registry.resolve_model_ref("demo:kit-test-model"))
    assert path == tmp_path / "demo" / "kit-test-model"
    assert json.loads((path / "config.json").read_text()) == {"seed": 7}
    assert json.loads((path / registry.STAMP_FILE).read_text())["name"] == "kit-test-model"


def test_a_name_registered_twice_differently_is_refused(registry):
    from ppspec_cli.demo.common import Spec
    from ppspec_cli.errors import PpspecError

    spec = Spec("test", 7, "a test model")
    registry.register_model("kit-test-model", spec, _write_config)
    with pytest.raises(PpspecError) as exc:
        registry.register_model("kit-test-model", spec, _other_builder)
    assert "registered twice" in exc.value.what
    with pytest.raises(PpspecError):
        registry.register_model("tiny-llama", spec, _write_config)  # a core name cannot be taken over


def test_an_unlisted_model_resolves_but_is_not_offered(registry):
    from ppspec_cli.demo.common import Spec

    registry.register_model("kit-test-hidden", Spec("test", 8, "device only"), _write_config, listed=False)
    assert "kit-test-hidden" not in registry.DEMO_MODELS
    assert (registry.ensure_demo_model("kit-test-hidden") / "config.json").is_file()
