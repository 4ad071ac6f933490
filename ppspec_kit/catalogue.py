"""The kit's entries in the demo catalogue, registered with ppspec_cli/demo/factory.py on import.

Names, seeds and builders are the ones the factory held before the kit moved out (FACTORY_VERSION
3): a model built from here is byte-identical to the one a cache already holds."""

from __future__ import annotations

from pathlib import Path

from ppspec_cli.demo.common import ALWAYS_TOKEN, Spec
from ppspec_cli.demo.factory import register_model, write_drafter, write_target
from ppspec_cli.demo.relay import (
    RELAY_DRAFTER,
    RELAY_SEED,
    RELAY_TAPS,
    RELAY_TARGET,
    relay_eagle3_config,
    relay_eagle3_weights,
)
from ppspec_kit.block import RELAY_DFLASH, RELAY_DSPARK, block_config, block_weights
from ppspec_kit.gpuval import (
    BIG_DRAFTER,
    BIG_TARGET,
    RELAY_DSV3_TARGET,
    RELAY_EAGLE1,
    RELAY_PLUS1,
    big_drafter_config,
    big_drafter_weights,
    big_target_config,
    big_target_weights,
    relay_dsv3_config,
    relay_dsv3_weights,
    relay_eagle1_config,
    relay_eagle1_weights,
    relay_plus1_config,
)
from ppspec_kit.relay import (
    RELAY_MOE_EXPERTS,
    RELAY_MOE_TARGET,
    RELAY_MOE_TOP_K,
    RELAY_ONE,
    relay_moe_config,
    relay_moe_weights,
    relay_one_weights,
)


def _relay_one(spec: Spec, out: Path) -> None:
    sd = relay_one_weights(spec)
    write_drafter(out, relay_eagle3_config(spec, sd["lm_head.weight"].shape[0]), sd)


def _relay_moe(spec: Spec, out: Path) -> None:
    write_target(out, relay_moe_config(), relay_moe_weights(spec.seed))


def _relay_plus1(spec: Spec, out: Path) -> None:
    sd = relay_eagle3_weights(spec)
    write_drafter(out, relay_plus1_config(spec, sd["lm_head.weight"].shape[0]), sd)


def _relay_block(spec: Spec, out: Path) -> None:
    method = spec.kind.removeprefix("relay-")
    sd = block_weights(method)
    write_drafter(out, block_config(method, sd["lm_head.weight"].shape[0]), sd)


def _relay_eagle1(spec: Spec, out: Path) -> None:
    write_drafter(out, relay_eagle1_config(), relay_eagle1_weights(spec.seed))


def _relay_dsv3(spec: Spec, out: Path) -> None:
    write_target(out, relay_dsv3_config(), relay_dsv3_weights(spec.seed))


def _big_target(spec: Spec, out: Path) -> None:
    write_target(out, big_target_config(), big_target_weights())


def _big_drafter(spec: Spec, out: Path) -> None:
    write_drafter(out, big_drafter_config(), big_drafter_weights())


register_model(
    RELAY_ONE,
    Spec(
        "relay-eagle3",
        4004,
        f"float32 EAGLE3 drafter for {RELAY_TARGET} that always proposes token {ALWAYS_TOKEN} (control: "
        "deterministic acceptance)",
        draft_vocab=1,
        always_token=ALWAYS_TOKEN,
    ),
    _relay_one,
)
register_model(
    RELAY_MOE_TARGET,
    Spec(
        "relay-qwen3-moe",
        RELAY_SEED,
        f"{RELAY_TARGET} as a float32 Qwen3-MoE ({RELAY_MOE_EXPERTS} identical experts per layer, "
        f"top-{RELAY_MOE_TOP_K}, seeded router): "
        f"the same function, so {RELAY_DRAFTER} serves it unchanged",
    ),
    _relay_moe,
)
# GPU validation (issue 13): the relay drafter naming its taps output-of-layer (+1), an EAGLE-1
# drafter, the planted DFlash and DSpark drafters, the relay target as DeepSeek-V3 (MLA), and an
# 8B-class shape built on the device.
register_model(
    RELAY_PLUS1,
    Spec(
        "relay-eagle3-plus1",
        4004,
        f"{RELAY_DRAFTER} with its taps only as top-level target_layer_ids {[t - 1 for t in RELAY_TAPS]} "
        "(output-of-layer, the DFlash/DSpark convention: vLLM adds 1)",
    ),
    _relay_plus1,
)
register_model(
    RELAY_EAGLE1,
    Spec(
        "relay-eagle1",
        5005,
        f"float32 EAGLE-1 drafter for {RELAY_TARGET} (no taps): proposes the target's next token from the token it "
        "is fed",
    ),
    _relay_eagle1,
)
register_model(
    RELAY_DFLASH,
    Spec(
        "relay-dflash",
        0,
        f"float32 DFlash drafter (Qwen3 layer, dflash_config.target_layer_ids {[t - 1 for t in RELAY_TAPS]}: vLLM "
        "adds 1) for "
        f"{RELAY_TARGET}: its first mask proposes the token two ahead from the taps of the last verified position, "
        "read through "
        "attention planted on RoPE distance; served with other taps its proposals go wrong",
    ),
    _relay_block,
)
register_model(
    RELAY_DSPARK,
    Spec(
        "relay-dspark",
        0,
        f"float32 DSpark drafter (Qwen3DSparkModel, dspark_target_layer_ids {[t - 1 for t in RELAY_TAPS]}, zero "
        "Markov head) for "
        f"{RELAY_TARGET}: its anchor proposes the token two ahead, as {RELAY_DRAFTER} does",
    ),
    _relay_block,
)
register_model(
    RELAY_DSV3_TARGET,
    Spec(
        "relay-dsv3",
        RELAY_SEED,
        f"{RELAY_TARGET} as a float32 DeepSeek-V3 checkpoint (MLA attention, dense MLPs): the same function, served "
        f"by {RELAY_DRAFTER}",
    ),
    _relay_dsv3,
)
# Built only where they run (17 GB, generated on the GPU): not listed in DEMO_MODELS, so the tests
# and the unknown-name error do not build or offer them.
register_model(
    BIG_TARGET,
    Spec(
        "big-target",
        8008,
        "bf16 Llama of 8B-class shape (32 layers, hidden 4096, GQA 32/8, intermediate 14336, vocab 32768) generated "
        "from a seed "
        "(16 GB: built where it runs, on the GPU when there is one); next token = a seeded successor map",
    ),
    _big_target,
    listed=False,
)
register_model(
    BIG_DRAFTER,
    Spec(
        "big-eagle3",
        8008,
        f"bf16 EAGLE3 drafter for {BIG_TARGET} (taps 2, 16, 29; draft vocab 32000): its first proposal is right "
        "after a "
        "seeded 45% of the tokens and never right (BOS) after the others",
    ),
    _big_drafter,
    listed=False,
)
