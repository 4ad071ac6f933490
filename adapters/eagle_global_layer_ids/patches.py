"""eagle_global_layer_ids: number EAGLE-1 draft layers globally (num_hidden_layers + i).

vLLM's EAGLE-1 drafters name their layers from `model_config.get_num_layers(parallel_config)`,
the PP-*local* layer count of the last stage. Under PP that collides with the stage's own layer
names and differs between engines with different PP (a PP=2 prefiller named a 93-layer target's
draft layers 46..50, its PP=1 decoder 93..97, and KV transfer by layer name failed). EAGLE3, DFlash
and DSpark drafters use the global count since vLLM 0.30; this pack makes the EAGLE-1 family do
the same by wrapping each drafter's __init__ (the original still builds the model; only the answer
of `get_num_layers` on the target config changes, and only while the drafter is constructed).

Loaded by file path by the ppspec plugin; never imported as part of a package.
"""

from __future__ import annotations

from ppspec_cli.running.engine import relay
from ppspec_cli.running.engine.patching import Patch

#: (module, class) of every EAGLE-1 drafter in vLLM 0.32 that numbers from the PP-local count.
DRAFTERS: tuple[tuple[str, str], ...] = (
    ("vllm.model_executor.models.llama_eagle", "EagleLlamaForCausalLM"),
    ("vllm.model_executor.models.llama4_eagle", "EagleLlama4ForCausalLM"),
    ("vllm.model_executor.models.minicpm_eagle", "EagleMiniCPMForCausalLM"),
    ("vllm.model_executor.models.cohere_eagle", "EagleCohereForCausalLM"),
    ("vllm.model_executor.models.deepseek_eagle", "EagleDeepseekV3ForCausalLM"),
    ("vllm.model_executor.models.mistral_eagle", "EagleMistralForCausalLM"),
    ("vllm.model_executor.models.mistral_large_3_eagle", "EagleMistralLarge3ForCausalLM"),
)


def get_patches() -> list[Patch]:
    return [
        Patch(
            name=f"global_numbering.{cls}",
            module=module,
            target=cls,
            attrs=lambda orig: {
                "__init__": relay.init_with_global_draft_numbering(orig.own("__init__") or orig["__init__"])
            },
            description=f"{cls} names its layers from the target's total depth",
            requires=("__init__",),
            check=relay.check_global_numbering,
            native=relay.natively_numbers_globally,
        )
        for module, cls in DRAFTERS
    ]
