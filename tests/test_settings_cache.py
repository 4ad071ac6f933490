"""Issue 32: every PPSPEC_* variable through one typed, bounded settings object (io/settings);
caches under a per-user root that is refused when someone else could have written it (io/cache);
YAML within a budget of what its aliases expand to and of JSON values only (io/yamlload)."""

from __future__ import annotations

import os

import pytest

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import cache, safeio, settings, yamlload


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("PPSPEC_STOP_GRACE_S", "nan"),
        ("PPSPEC_STOP_GRACE_S", "inf"),
        ("PPSPEC_STOP_GRACE_S", "-1"),
        ("PPSPEC_STOP_GRACE_S", "1e9"),
        ("PPSPEC_STOP_GRACE_S", "soon"),
        ("PPSPEC_HUB_DEADLINE", "0"),
        ("PPSPEC_HUB_DOWNLOAD_LIMIT_GB", "nan"),
    ],
)
def test_an_out_of_bounds_variable_is_one_error_naming_it(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(PpspecError) as e:
        settings.settings()
    assert e.value.where == var and var in e.value.fix and e.value.exit_code == 2


def test_stop_grace_nan_is_refused_before_the_engine_starts(monkeypatch):
    """It used to read as 0 s: the first Ctrl-C killed the engine at once."""
    from ppspec_cli.running.serve.supervise import STOP_GRACE_S, stop_grace_s

    monkeypatch.setenv("PPSPEC_STOP_GRACE_S", "nan")
    with pytest.raises(PpspecError, match="PPSPEC_STOP_GRACE_S"):
        stop_grace_s()
    monkeypatch.setenv("PPSPEC_STOP_GRACE_S", "2")
    assert stop_grace_s() == 2.0
    monkeypatch.delenv("PPSPEC_STOP_GRACE_S")
    assert stop_grace_s() == STOP_GRACE_S


def test_cache_set_to_a_file_is_one_clear_error(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_text("x")
    monkeypatch.setenv("PPSPEC_CACHE", str(f))
    with pytest.raises(PpspecError, match="not a directory") as e:
        cache.owned_dir("demo")
    assert e.value.where == "PPSPEC_CACHE"


def test_the_default_cache_is_per_user_not_tmp(monkeypatch, tmp_path):
    monkeypatch.delenv("PPSPEC_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    root = settings.cache_root()
    assert str(root).startswith(str(tmp_path)) and not str(root).startswith("/tmp/ppspec")


@pytest.mark.parametrize("bad", ["group-writable", "world-writable", "symlink", "other-owner"])
def test_a_cache_someone_else_can_write_is_refused_with_its_path(tmp_path, monkeypatch, bad):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    sub = root / "demo"
    if bad == "symlink":
        (tmp_path / "elsewhere").mkdir()
        sub.symlink_to(tmp_path / "elsewhere")
    else:
        sub.mkdir(mode=0o700)
        if bad == "group-writable":
            os.chmod(sub, 0o770)
        elif bad == "world-writable":
            os.chmod(sub, 0o777)
        elif os.geteuid() == 0:
            os.chown(sub, 65534, 65534)
        else:
            pytest.fail("the other-owner case needs root (chown), as CI runs")
    monkeypatch.setenv("PPSPEC_CACHE", str(root))
    with pytest.raises(PpspecError, match="does not use it") as e:
        cache.owned_dir("demo")
    assert str(sub) in e.value.what


def test_an_owned_cache_is_created_private_and_used(tmp_path, monkeypatch):
    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path / "c"))
    d = cache.owned_dir("runs")
    assert d.is_dir() and (os.stat(d).st_mode & 0o077) == 0
    f = d / "x.json"
    f.write_text("{}")
    assert cache.owned_file(f)
    os.chmod(f, 0o666)
    with pytest.raises(PpspecError, match="writable by others"):
        cache.owned_file(f)


def test_a_planted_option_cache_is_refused_not_used(tmp_path, monkeypatch):
    """Another user's option-name file in a shared cache made serve launch an option vLLM lacks."""
    from ppspec_cli.knowledge import installcache

    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o777)
    monkeypatch.setenv("PPSPEC_CACHE", str(root))
    with pytest.raises(PpspecError, match="writable by others"):
        installcache.read("serve-options", "k")


# --- YAML by budget -------------------------------------------------------------------------


def _bomb(copies: int, size: int = 1000) -> str:
    return "name: x\nnote: &a " + "y" * size + "\nengine: {l: [" + ", ".join(["*a"] * copies) + "]}\n"


def test_a_small_profile_that_expands_to_megabytes_is_refused_at_load(tmp_path):
    """27 KB of text standing for 40 MB: refused by the byte budget (it has few nodes)."""
    from ppspec_cli.planning.profile import MAX_PROFILE_NODES, parse_profile

    text = _bomb(5_000, 8000)  # 5,000 uses of an 8 KB string: 40 MB
    assert len(text) < 40_000 and 5_000 < MAX_PROFILE_NODES
    with pytest.raises(PpspecError, match="expands to more than"):
        parse_profile(text, "p.yaml")


def test_the_budget_can_fail_both_ways():
    """The same graph passes with a budget above its size and is refused one byte below."""
    node = yamlload.compose(_bomb(10, 100))
    nodes, size = yamlload.expanded_size(node, 10_000, 1 << 20)
    assert yamlload.expanded_size(node, nodes, size) == (nodes, size)
    assert yamlload.expanded_size(node, nodes, size - 1) is None
    assert yamlload.expanded_size(node, nodes - 1, size) is None


@pytest.mark.parametrize(
    "value", ["2024-01-01", "2024-01-01T10:00:00Z", "!!binary aGk=", "!!set {a, b}", ".nan", "-.inf"]
)
def test_a_non_json_value_in_engine_is_refused_with_its_key(value):
    from ppspec_cli.planning.profile import parse_profile

    with pytest.raises(PpspecError, match=r"`engine\.x`") as e:
        parse_profile(f"name: x\ntarget: {{model: a/b}}\nengine:\n  x: {value}\n", "p.yaml")
    assert e.value.where == "p.yaml:4"


def test_quoted_dates_and_plain_numbers_load():
    assert yamlload.load("a: '2024-01-01'\nb: 1.5\nc: 1e3", what="x", source="s", max_nodes=100, max_bytes=1000) == {
        "a": "2024-01-01",
        "b": 1.5,
        "c": "1e3",
    }


def test_columns_zero_does_not_hide_errors(monkeypatch):
    from ppspec_cli.io import terminal

    for bad in ("0", "-3", "abc", "5"):
        monkeypatch.setenv("COLUMNS", bad)
        assert terminal.console(stderr=True).width >= terminal.MIN_COLUMNS
    monkeypatch.setenv("COLUMNS", "120")
    assert terminal._sane_width() is None


def test_open_log_never_truncates_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    log = tmp_path / "loadgen.log"
    log.symlink_to(victim)
    with safeio.open_log(log) as f:
        f.write("ours\n")
    assert victim.read_text() == "root's file\n"
    assert not log.is_symlink() and log.read_text() == "ours\n"


def test_remove_tree_unlinks_a_planted_link_and_never_its_target(tmp_path):
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep").write_text("x")
    arm = tmp_path / "arms" / "baseline"
    arm.parent.mkdir()
    arm.symlink_to(target)
    safeio.remove_tree(arm)
    assert not os.path.lexists(arm) and (target / "keep").read_text() == "x"


@pytest.mark.parametrize(
    ("var", "value"), [("PPSPEC_STOP_GRACE_S", "nan"), ("PPSPEC_CACHE", "__FILE__"), ("PPSPEC_HUB_DEADLINE", "-1")]
)
def test_a_bad_variable_is_one_cli_error_before_anything_runs(tmp_path, var, value):
    """Every command checks the PPSPEC_* variables first: one message naming the variable, exit 2,
    no traceback (PPSPEC_CACHE set to a file used to print one)."""
    import inprocess

    if value == "__FILE__":
        value = str(tmp_path / "f")
        (tmp_path / "f").write_text("x")
    r = inprocess.run("check", "does-not-matter.yaml", env={var: value})
    assert r.returncode == 2, r.stdout + r.stderr
    assert var in r.stderr and "Traceback" not in r.stderr and "not found" not in r.stderr
