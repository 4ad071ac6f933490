"""Connector facts: what each vLLM KV connector does between a prefill and a decode engine, per vLLM
version, read off the vLLM 0.30.0, 0.32.0 and 0.33.0 sources. Every fact carries its citation
(file and line inside the `vllm` package of that version) so a reader can check it.

The rules (ppspec_cli/planning/pd.py) ask this module; they hold no connector literal of their own. A
connector or a version missing here is reported as unknown, never guessed.

Files below are relative to `vllm/distributed/kv_transfer/kv_connector/v1/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ppspec_cli.knowledge.packs import in_range

Side = Literal["prefill", "decode"]
Status = Literal["supported", "refused", "unknown"]

#: The vLLM releases these facts were read from.
CHECKED_RANGE = ">=0.30,<0.34"


@dataclass(frozen=True)
class Fact:
    """One thing a connector does or refuses, for a vLLM range, with where vLLM says so."""

    status: Literal["supported", "refused"]
    vllm: str  # PEP 440 range
    why: str
    source: str  # "<file>:<line> (<version>)"


@dataclass(frozen=True)
class Connector:
    name: str
    kv_role: dict[Side, str]  # the `kv_role` each engine gets
    #: PP>1 on each side (the handshake has to exchange each side's PP size, or the connector refuses).
    pp: dict[Side, tuple[Fact, ...]]
    #: PP>1 on the prefill side with a hybrid KV cache (HMA: several attention types) / with Mamba-like state.
    pp_hybrid: tuple[Fact, ...] = ()
    pp_mamba: tuple[Fact, ...] = ()
    #: the two engines may differ in TP / block size; they must agree on the KV cache dtype.
    tp_mismatch: tuple[Fact, ...] = ()
    block_size_mismatch: tuple[Fact, ...] = ()
    kv_dtype_mismatch: tuple[Fact, ...] = ()
    #: decode-side prefill context parallel (PCP > 1)
    pcp_decode: tuple[Fact, ...] = ()
    by_layer_name: bool = False  # KV is matched between engines by layer name
    router: str | None = None  # the proxy vLLM ships for it (path in the vLLM source tree, not in the wheel)
    note: str = ""


_ALL = CHECKED_RANGE


def _nixl(name: str, mode: Literal["pull", "push"]) -> Connector:
    hybrid = (
        Fact(
            "refused",
            ">=0.30,<0.31",
            "PP>1 with a hybrid KV cache layout (HMA) is refused in both modes",
            "nixl/base_worker.py:645 (0.30.0)",
        ),
        Fact(
            "refused",
            ">=0.31,<0.34",
            "the pull worker refuses PP>1 with a hybrid KV layout (HMA); NixlPushConnector routes HMA layers by name",
            "nixl/base_worker.py:764 (0.32.0), :875 (0.33.0)",
        )
        if mode == "pull"
        else Fact(
            "supported",
            ">=0.31,<0.34",
            "the push worker sets _supports_pp_hma and routes HMA layers by layer name",
            "nixl/push_worker.py:86 (0.32.0), :87 (0.33.0)",
        ),
    )
    return Connector(
        name=name,
        kv_role={"prefill": "kv_producer", "decode": "kv_consumer"},
        pp={
            "prefill": (
                Fact(
                    "supported",
                    _ALL,
                    "the producer passes its pp_size in kv_transfer_params and the consumer asks every remote "
                    "(pp_rank, tp_rank) for its metadata",
                    "nixl/base_scheduler.py:216 + base_worker.py:886 (0.30.0); :216 + :1030 (0.32.0); :219 + :1147 "
                    "(0.33.0); "
                    "docs/features/nixl_connector_compatibility.md 'Pipeline parallelism' (0.33.0)",
                ),
            ),
            "decode": (
                Fact(
                    "refused",
                    _ALL,
                    "a kv_consumer with pipeline_parallel_size > 1 raises NotImplementedError at start (completions "
                    "are counted per consumer rank; the handshake does not carry the decode side's PP size)",
                    "nixl/base_worker.py:650 (0.30.0), :777 (0.32.0), :888 (0.33.0)",
                ),
            ),
        },
        pp_hybrid=hybrid,
        pp_mamba=(
            Fact(
                "refused",
                ">=0.30,<0.31",
                "Mamba/SSM state is part of the hybrid layout refused under PP",
                "nixl/base_worker.py:645 (0.30.0)",
            ),
            Fact(
                "refused",
                ">=0.31,<0.34",
                "PP>1 with Mamba/SSM hybrid KV cache layouts is refused",
                "nixl/base_worker.py:772 (0.32.0), :883 (0.33.0)",
            ),
        ),
        tp_mismatch=(
            Fact(
                "supported",
                _ALL,
                "heterogeneous TP is mapped at the handshake (tp_ratio), within the KV-head sharding limits",
                "nixl/base_worker.py:337 (0.32.0), tp_mapping.py",
            ),
        ),
        block_size_mismatch=(
            Fact(
                "supported",
                _ALL,
                "a different remote block size is mapped (block_size_ratio)",
                "nixl/tp_mapping.py:138-171 (0.32.0)",
            ),
        ),
        kv_dtype_mismatch=(
            Fact(
                "refused",
                _ALL,
                "the handshake's compatibility hash covers the vLLM version, model dtype, KV cache dtype, attention "
                "backend, speculative config and HMA; a mismatch is refused",
                "nixl/metadata.py:145 compute_nixl_compatibility_hash (0.32.0), base_worker.py:1081",
            ),
        ),
        pcp_decode=(
            Fact(
                "refused",
                _ALL,
                "prefill context parallel > 1 is refused on a kv_consumer / kv_both side",
                "nixl/connector.py:105 (0.30.0), :108 (0.32.0, 0.33.0)",
            ),
        ),
        by_layer_name=mode == "push",
        router="tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
        if mode == "pull"
        else "examples/disaggregated/disaggregated_serving/disagg_proxy_pushconnector_demo.py",
        note=f"NixlConnector is the {mode} connector" if name == "NixlConnector" else "",
    )


def _both_sides(why: str, source: str) -> dict[Side, tuple[Fact, ...]]:
    """PP supported on either side, in every checked version."""
    return {side: (Fact("supported", _ALL, why, source),) for side in ("prefill", "decode")}


CONNECTORS: dict[str, Connector] = {
    c.name: c
    for c in (
        _nixl(
            "NixlConnector", "pull"
        ),  # `NixlConnector = NixlPullConnector`: nixl/connector.py:408 (0.30.0), :414 (0.32.0), :432 (0.33.0)
        _nixl("NixlPullConnector", "pull"),
        _nixl("NixlPushConnector", "push"),
        Connector(
            name="MooncakeConnector",
            kv_role={"prefill": "kv_producer", "decode": "kv_consumer"},
            pp=_both_sides(
                "the transfer metadata carries remote_pp_size; with different PP sizes the producer sends once per "
                "remote stage and aligns regions by layer name (partial layers allowed)",
                "mooncake/mooncake_connector.py:1433 (0.30.0), :1706 (0.32.0), :1790 (0.33.0)",
            ),
            pp_hybrid=(
                Fact(
                    "refused",
                    ">=0.31,<0.34",
                    "packed regions that are not page-contiguous keep only their first layer name and cannot be "
                    "aligned across different PP sizes",
                    "mooncake/mooncake_connector.py:575 _pp_mismatch_hides_packed_layers (0.32.0), :586 (0.33.0)",
                ),
            ),
            by_layer_name=True,
            router="examples/disaggregated/mooncake_connector/mooncake_connector_proxy.py",
        ),
        Connector(
            name="ExampleConnector",
            kv_role={"prefill": "kv_both", "decode": "kv_both"},
            pp=_both_sides(
                "every worker saves and loads its own layers as <storage>/<prompt hash>/<layer name>.safetensors: "
                "PP-agnostic, but matched by layer name",
                "example_connector.py:446 (0.30.0), :452 (0.32.0, 0.33.0)",
            ),
            tp_mismatch=(
                Fact(
                    "refused",
                    _ALL,
                    "each file holds the saving worker's KV heads as is; a different TP loads the wrong shard",
                    "example_connector.py save_kv_layer / start_load_kv",
                ),
            ),
            block_size_mismatch=(
                Fact(
                    "supported",
                    _ALL,
                    "tokens are saved by slot, not by block",
                    "example_connector.py extract_kv_from_layer",
                ),
            ),
            kv_dtype_mismatch=(
                Fact(
                    "refused",
                    _ALL,
                    "the saved tensor is copied into the paged cache as is",
                    "example_connector.py inject_kv_into_layer",
                ),
            ),
            by_layer_name=True,
            router="examples/disaggregated/disaggregated_serving/disagg_proxy_demo.py",
            note="a debugging connector through a shared directory (`extra_config.shared_storage_path`, default "
            "/tmp); works on the CPU platform",
        ),
    )
}

#: Connectors vLLM registers that do not move KV between a prefill and a decode engine, or whose
#: behaviour lives outside vLLM (ppspec cannot read it from vLLM's source).
OTHER: dict[str, str] = {
    "LMCacheConnectorV1": "delegates to the external lmcache package (lmcache_connector.py); its PP handling is "
    "LMCache's, not in vLLM's source",
    "LMCacheMPConnector": "delegates to an external LMCache server (lmcache_mp_connector.py); its PP handling is "
    "LMCache's",
    "OffloadingConnector": "offloads KV to CPU/storage tiers of the same engine (offloading_connector.py); not a "
    "prefill->decode transfer",
    "SimpleCPUOffloadConnector": "offloads KV to CPU memory of the same engine (simple_cpu_offload_connector.py); "
    "not a prefill->decode transfer",
    "P2pNcclConnector": "not registered in vLLM 0.30-0.33 (factory.py): removed before 0.30",
}


def get(name: str) -> Connector | None:
    return CONNECTORS.get(name)


def fact_for(facts: tuple[Fact, ...], version: str) -> Fact | None:
    """The fact whose range holds this vLLM version (None: not known for this version)."""
    return next((f for f in facts if in_range(f.vllm, version)), None)


def status(facts: tuple[Fact, ...], version: str) -> tuple[Status, str, str]:
    """(status, why, source) of a fact table for one vLLM version."""
    f = fact_for(facts, version)
    if f is None:
        return "unknown", f"not read for vLLM {version} (ppspec's connector facts cover {CHECKED_RANGE})", ""
    return f.status, f.why, f.source
