"""Deterministic tiny models for the CPU demo, the tests and CI.

There is no hub access on CPU hosts and CI, so ppspec builds its own models: a 6-layer Llama
target and EAGLE3 drafters for it (``tiny``), plus a float32 "relay" target and drafter with
planted structure that make acceptance depend on exactly which taps reach the drafter (``relay``,
for PP relay checks). All are random but seeded, so every machine gets byte-identical files for
the same FACTORY_VERSION. Each model is built once under ``demo_cache_dir()/<name>`` and written
atomically (temp dir + rename), so an interrupted build never leaves a half model (``factory``).

Refer to them as ``demo:<name>`` wherever a model is accepted; ``resolve_model_ref`` turns that
into the local directory. Only the models the shipped profiles and README use are here; the GPU
validation's models live in the repo's ``ppspec_kit`` package (not in the wheel), which registers
them with the factory's catalogue (``register_model``) when a checkout has it.
"""

from ppspec_cli.demo.common import (
    ALWAYS_TOKEN,
    BOS_ID,
    BOS_TOKEN,
    DTYPE,
    EAGLE3_DRAFT_VOCAB,
    EAGLE3_TAPS,
    EAGLE3_TAPS_OUTPUT_OF_LAYER,
    EOS_ID,
    EOS_TOKEN,
    HEAD_DIM,
    HIDDEN_SIZE,
    INTERMEDIATE_SIZE,
    MAX_POSITIONS,
    NUM_HEADS,
    NUM_LAYERS,
    RMS_EPS,
    ROPE_THETA,
    TRIGGER_EVERY,
    VOCAB_SIZE,
    trigger_tokens,
)
from ppspec_cli.demo.factory import (
    DEMO_MODELS,
    DEMO_PREFIX,
    FACTORY_VERSION,
    KIT_MODULE,
    STAMP_FILE,
    TARGET_NAME,
    Description,
    built_demo_model,
    demo_cache_dir,
    demo_model_path,
    describe_demo_model,
    ensure_demo_model,
    is_demo_ref,
    register_model,
    resolve_model_ref,
)
from ppspec_cli.demo.relay import (
    RELAY_DRAFTER,
    RELAY_DTYPE,
    RELAY_TAPS,
    RELAY_TARGET,
    relay_successors,
    relay_taps_clean,
    relay_two_ahead,
    rms_norm,
)

__all__ = [
    "ALWAYS_TOKEN",
    "BOS_ID",
    "BOS_TOKEN",
    "DEMO_MODELS",
    "DEMO_PREFIX",
    "DTYPE",
    "EAGLE3_DRAFT_VOCAB",
    "EAGLE3_TAPS",
    "EAGLE3_TAPS_OUTPUT_OF_LAYER",
    "EOS_ID",
    "EOS_TOKEN",
    "FACTORY_VERSION",
    "HEAD_DIM",
    "HIDDEN_SIZE",
    "INTERMEDIATE_SIZE",
    "KIT_MODULE",
    "MAX_POSITIONS",
    "NUM_HEADS",
    "NUM_LAYERS",
    "RELAY_DRAFTER",
    "RELAY_DTYPE",
    "RELAY_TAPS",
    "RELAY_TARGET",
    "RMS_EPS",
    "ROPE_THETA",
    "STAMP_FILE",
    "Description",
    "TARGET_NAME",
    "TRIGGER_EVERY",
    "VOCAB_SIZE",
    "built_demo_model",
    "demo_cache_dir",
    "demo_model_path",
    "describe_demo_model",
    "ensure_demo_model",
    "is_demo_ref",
    "register_model",
    "relay_successors",
    "relay_taps_clean",
    "relay_two_ahead",
    "resolve_model_ref",
    "rms_norm",
    "trigger_tokens",
]
