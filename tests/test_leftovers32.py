"""Issue 32's leftovers: option spellings that reach vLLM under another name than the rule's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from ppspec_cli.planning.engine_options import read_options, untrusted_findings
from ppspec_cli.planning.profile import Profile
from ppspec_cli.running.launch import engine_args

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "key",
    [
        "kv-transfer-config",
        "kv_transfer_config",
        "--kv-transfer-config",
        "kv-transfer",
        "kv_transfer_config.kv_connector",
        "kv-transfer-config.kv_connector_module_path",
        "kv-trans.kv_connector_extra_config.shared_storage_path",
    ],
)
@pytest.mark.parametrize("where", ["engine", "prefill", "decode"])
def test_a_pd_profile_refuses_every_spelling_of_the_kv_transfer_config(key, where):
    """ppspec sets --kv-transfer-config for each engine from `kv_transfer`: an abbreviation or a
    dotted override of it under `engine:` would reach vLLM next to (and over) the one ppspec sets."""
    data = yaml.safe_load((REPO / "profiles/kimi_k3_dspark_pd.yaml").read_text())
    eng = data.setdefault("engine", {}) if where == "engine" else data["roles"][where].setdefault("engine", {})
    eng[key] = "x"
    with pytest.raises(ValidationError, match="sets it for each engine from `kv_transfer`"):
        Profile.model_validate(data)


@pytest.mark.parametrize(
    "key", ["no-trust-request-chat-template", "no_trust_request_mm_kwargs", "--no-trust-request-chat"]
)
def test_a_negated_untrusted_flag_set_false_is_the_flag_turned_on(key):
    """`no-x: false` becomes `--x` on the command line: the same risk as `x: true`."""
    assert any(a.startswith("--trust-request") for a in engine_args(read_options({key: False})))
    assert [f.code for f in untrusted_findings({key: False}, {}, None)] == ["engine-untrusted-option"]
    assert untrusted_findings({key: True}, {}, None) == []
