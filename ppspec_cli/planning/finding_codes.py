"""The findings reference: every code `check`, `plan` and `serve` can report, with its cause and
what to do, in a few words. `ppspec docs --findings` prints it as Markdown (docs/findings.md, which
is generated from this table); tests/test_findings_reference.py holds it against the code base:
every code the code constructs has an entry here, and every entry is a code the code can report.

The messages themselves carry the numbers (which taps, which layer count, which file); an entry
says what the code means in general. Severity is not listed: some codes are an error in one
situation and a warning in another (the message says which applies).
"""

from __future__ import annotations

#: section title -> {code: (cause, fix)}. Sections are in the order the docs show them.
SECTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "Topology and layer partition": {
        "partition-length": ("`topology.layer_partition` has not one entry per pipeline stage.", "Give exactly `pipeline_parallel` layer counts."),
        "partition-empty-stage": ("A stage of `layer_partition` has no layers; vLLM refuses it.", "Give every stage at least one layer."),
        "partition-sum": ("`layer_partition` does not add up to the target's layer count; vLLM refuses it after minutes of start-up.", "Make the entries sum to the layer count `ppspec plan` shows, or drop `layer_partition` for vLLM's default split."),
        "topology-gpu-count": ("TP x PP x DP is not the number of GPUs `nodes` x `gpus_per_node` provides.", "Make the two products equal; vLLM gives every GPU one rank."),
        "topology-node-split": ("The ranks cannot be spread evenly over the nodes.", "Choose a node count that divides TP x PP x DP."),
        "topology-tp-across-nodes": ("Tensor parallelism spans nodes: its all-reduces cross the network every layer.", "Keep TP within a node and put pipeline stages across nodes."),
        "topology-master-addr": ("A multi-node `mp` launch without the head's address: fine for SLURM and Kubernetes (they supply it; a warning in `check`, dry runs and exports), refused by `serve` started by hand.", "Set `launch.master_addr`, pass `--master-addr`, or run inside SLURM (the allocation's first host)."),
        "topology-ray-cpu": ("`launch.executor: ray` on the CPU platform, which vLLM's Ray executors cannot run.", "Use `launch.executor: mp` on CPU."),
        "node-head-unroutable": ("From this host the head's address (`launch.master_addr`) is not reachable: a node that cannot reach the head never joins it.", "Run `ppspec check` on each node; give `launch.master_addr` as an address the nodes reach (the head's on the cluster network)."),
        "node-hostname-loopback": ("This host's name resolves to a loopback address: vLLM's Gloo/NCCL groups take their address from the host name unless told, and the other nodes cannot reach loopback.", "`ppspec serve` sets GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and VLLM_HOST_IP from the route to the head (`serve --dry-run --node-rank i` shows them); set them in `env:` to choose yourself."),
        "node-ports": ("The TCP ports the nodes use (vLLM's rendezvous, ppspec's roll call, the API, vLLM's own groups): for the firewall.", "Open them between the nodes."),
        "topology-install-everywhere": ("A multi-node profile: ppspec's vLLM plugin must run in every node's workers.", "Install the same ppspec wheel next to the same vLLM on every node; compare `ppspec --version` (README: Install on a GPU cluster)."),
        "draft-tp": ("The drafter's tensor parallelism is neither 1 nor the target's; vLLM refuses it.", "Set `drafter.tensor_parallel` to 1 or to the target's TP."),
        "heads-zero": ("The target's config has no attention heads (`num_attention_heads` 0): vLLM builds no attention layer.", "Fix the checkpoint's config.json."),
        "kv-heads-zero": ("The target's config has `num_key_value_heads` 0: vLLM cannot split it.", "Fix the checkpoint's config.json."),
        "heads-tp-indivisible": ("Tensor parallelism does not divide the target's attention heads; vLLM refuses it at start.", "Use a `tensor_parallel` that divides the head count."),
        "kv-heads-tp-indivisible": ("Tensor parallelism and the KV head count do not fit (TP must divide the KV heads, or be a multiple of them); vLLM refuses it.", "Use a `tensor_parallel` the message names."),
        "max-model-len-invalid": ("`engine: max-model-len` is not a positive length (or -1); vLLM refuses it.", "Give a positive number of tokens, or -1 to fit the memory."),
        "max-model-len-too-large": ("`engine: max-model-len` exceeds what the target's config allows; vLLM refuses it at start.", "Use at most the length the message gives (or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the model extrapolates)."),
    },
    "Taps (the hidden states an EAGLE3-family drafter reads)": {
        "taps-default": ("The drafter config names no taps, so vLLM uses the target's defaults (2, n//2, n-3). Right for heads trained on them (EAGLE-3's reference trainer); wrong ones collapse acceptance silently.", "Find the trained layers in the drafter's recipe or model card and pin `drafter.taps` (vLLM capture points); `ppspec verify` shows wrong taps as an acceptance near 0."),
        "taps-nested-eagle-config": ("The drafter nests its taps under `eagle_config` (SGLang/SpecForge): vLLM's V2 runner ignores that key, V1 reads it one layer early.", "Nothing when serving with ppspec: it serves the drafter through a config overlay with the right top-level taps. Override with `drafter.tap_convention` or `drafter.taps`."),
        "taps-runner-mismatch": ("The runner that will run would read other taps than the drafter was trained on.", "Nothing when serving with ppspec: the config overlay gives the runner the trained taps."),
        "taps-malformed": ("The drafter config's tap list is not a list of layer ids vLLM can read.", "Fix the drafter's config.json, or pin `drafter.taps`."),
        "taps-unsorted": ("Tap ids are not sorted; vLLM sorts them, so the drafter's fc sees them in another order than written.", "Check the order the drafter was trained with."),
        "taps-duplicate": ("A tap id repeats; vLLM de-duplicates, so fewer taps reach the drafter than it was built for.", "Remove the duplicate."),
        "taps-out-of-range": ("A tap lies outside 0..layer count (tap L is the output of layer L-1).", "Use taps between 0 and the target's layer count."),
        "taps-pinned-differ": ("`drafter.taps` differs from the taps the drafter config names.", "Make sure the drafter was trained on the pinned taps (the pinned ones are served)."),
        "taps-off": ("The drafter turns tap use off (`use_aux_hidden_state: false`): nothing is tapped or relayed.", "None needed if intended."),
        "fc-width-taps": ("The drafter's fc layer takes another number of taps (its width / hidden size) than the engine will feed it.", "Pin `drafter.taps` to the taps it was trained on (as many as its fc takes)."),
        "fc-width-built": ("The drafter's fc layer does not fit what the engine builds or feeds it (width vs hidden size and tap count): loading or the first forward fails on the shape.", "Use the taps and checkpoint the drafter was trained with (the message gives the shapes)."),
    },
    "Drafter and target": {
        "method-mismatch": ("The drafter checkpoint was built for another method than `drafter.method`.", "Set `drafter.method` to the checkpoint's method, or use a drafter built for this one."),
        "method-unknown": ("The drafter config does not say which method it was built for (e.g. it names a plain causal-LM architecture).", "Check that the checkpoint really is a drafter for `drafter.method` (its model card)."),
        "mtp-no-layers": ("`method: mtp` but the target's config declares no MTP layers.", "Use a target with MTP heads, or an external drafter."),
        "eagle1-pp-local-ids": ("EAGLE-1 draft layers numbered from the last stage's local layer count under PP: their ids collide with target layers and KV transfer between engines breaks.", "Use `adapter: eagle_global_layer_ids`, or an EAGLE3 drafter."),
        "hidden-size-mismatch": ("The drafter's hidden size is not the target's.", "Use a drafter trained for this target."),
        "vocab-mismatch": ("The drafter's vocabulary does not match the target's.", "Use a drafter trained for this target's tokenizer."),
        "draft-vocab-larger": ("The drafter's draft vocabulary is larger than the target's: draft ids beyond it map to no target token.", "Use the drafter trained for this target's tokenizer."),
        "d2t-missing": ("A reduced draft vocabulary without the `d2t` tensor mapping draft ids to target ids.", "Use the drafter's complete checkpoint (with `d2t`)."),
        "d2t-not-checked": ("A reduced draft vocabulary needs a `d2t` tensor; the weights are not here, so it was not looked for.", "None on a login node; it is checked where the weights are."),
        "embed-last-stage": ("The drafter shares the target's embedding, but the target does not build it on the last stage under PP; vLLM fails at start.", "Use an adapter pack that provides `target_embed_on_last_stage` (`ppspec adapters list`)."),
        "embed-last-stage-unknown": ("Whether the target builds its embedding on the last stage under PP (which a drafter sharing it needs) is not known for this vLLM.", "Settle it where vLLM is installed: `check --probes` reads the inner decoder by value (the plugin asserts it in every engine process)."),
        "embedding-found": ("Where the last stage loads the target embedding from (for the drafter).", "None: information."),
        "embedding-not-found": ("The last stage needs the target embedding, but no tensor of that name is in the checkpoint.", "Check the checkpoint, or add its embedding name to the adapter pack's facts."),
        "embedding-not-checked": ("Where the last stage's target embedding lives was not checked (no index or weights here).", "None on a login node; it is checked where the weights are."),
        "dspark-needs-v2": ("DSpark exists only in vLLM's Model Runner V2, and this platform runs V1; vLLM refuses at start.", "Run on GPUs with vLLM >= 0.30."),
    },
    "Drafter contract (DFlash, DSpark: what vLLM requires of the drafter's config and tensors)": {},  # filled from drafter_contract.codes()
    "Engine options and environment": {
        "engine-bad-option-name": ("An `engine:` key that is not a vLLM option name.", "Use vLLM's long option names without `--`, the value as the YAML value (`max-model-len: 4096`)."),
        "engine-ambiguous-option": ("An `engine:` key that is a prefix of several vLLM options (argparse refuses it).", "Write the option's full name."),
        "engine-untrusted-option": ("An `engine:` option that makes the engine run code, read a path, reach an endpoint or drop a safety check, not acknowledged in `trust.engine`.", "Remove it, or acknowledge it under `trust: {engine: [...]}` once you have read what it points at."),
        "env-untrusted-entry": ("An `env:` entry that makes the engine run code, read a path, reach an endpoint or drop a safety check, not acknowledged in `trust.env`.", "Remove it, or acknowledge it under `trust: {env: [...]}` once you have read what it points at."),
        "engine-managed-option": ("An `engine:` option ppspec derives from the profile (in any spelling vLLM takes for it).", "Set the profile field the message names instead."),
        "engine-refused-option": ("An `engine:` option ppspec does not support (`config`: options ppspec could not see).", "Put each option under `engine:` in the profile."),
        "engine-overrides-depth": ("`hf-overrides` that change the model's layer count: the engine would build another model than the one planned.", "Point `target.model` at a checkpoint with that depth."),
        "engine-unknown-option": ("An `engine:` option the installed vLLM does not know (checked by `serve` and `check --probes`).", "Check the name against `vllm serve --help`."),
        "engine-secret-option": ("A secret under `engine:`: it would be on the engine's command line and in launch.json.", "Remove it; export it in the shell that runs `ppspec serve`."),
        "env-secret": ("A secret-looking name under `env:`.", "Remove it from the profile; export it in the shell (for the API key: `server.api_key_env`)."),
        "env-overrides-plan": ("VLLM_PP_LAYER_PARTITION / VLLM_USE_V2_MODEL_RUNNER (or PPSPEC_*) set by hand: they would override the plan.", "Unset them; use `topology.layer_partition`."),
        "env-plugins-skip-ppspec": ("VLLM_PLUGINS leaves out ppspec: its plugin would not run and the engine would serve unchecked and unpatched.", "Add ppspec to VLLM_PLUGINS, or unset it."),
        "api-key-env-unset": ("`server.api_key_env` names a variable that is not set where this runs. A warning for `check`, dry runs and exports; `serve` refuses to start without it.", "Export the variable on the node that serves before `ppspec serve`."),
        "pp-refused-option": ("An engine option vLLM refuses together with pipeline parallelism.", "Remove it, or use pipeline_parallel: 1."),
        "pp-fastsafetensors": ("`load-format: fastsafetensors` under PP: before vLLM 0.30 the draft load deadlocks; since, the drafter falls back to `auto`.", "Use `load-format: auto`, or vLLM >= 0.30."),
        "server-exposed-no-key": ("The server binds a non-loopback address without an API key.", "Set `server.api_key_env`, or bind 127.0.0.1."),
        "trust-remote-code": ("`trust_remote_code: true`: the checkpoint's own Python code runs in the engine.", "Keep it off unless the model needs it and you trust its repository."),
    },
    "Platform, vLLM and adapter packs": {
        "vllm-not-installed": ("vLLM is not installed here: probes not run; the verdict is for the version the message names.", "None on a login node; install vLLM where the engine runs, or set `engine_version` (README: Install on a GPU cluster)."),
        "vllm-too-old": ("This vLLM refuses speculative decoding with pipeline parallelism (support arrived in 0.30).", "Install vLLM >= 0.30."),
        "vllm-unverified": ("This vLLM is not a release ppspec verified: the verdict carries the newest verified release's facts forward.", "Settle it where vLLM is installed: `check --probes` reads the engine by value (class attributes, tap resolution, partition, every patch anchor)."),
        "vllm-probed": ("An unverified vLLM that `check --probes` read by value and found to match what the profile needs.", "None: information."),
        "engine-version-overruled": ("The profile's `engine_version` differs from the installed vLLM: the verdict and the launch are for the installed one.", "Set `engine_version` to the installed version, drop it, or check where the declared one is installed."),
        "platform-not-served": ("The profile's platform is not what the installed vLLM build serves. `serve` refuses here; `serve --dry-run` and `export` leave it to the nodes that serve.", "Set `platform` to this build's (or auto), or run where a build for the profile's platform is installed."),
        "cpu-pp-taps": ("A tap-based drafter with PP > 1 on the CPU platform, whose V1 runner does not relay taps.", "Use pipeline_parallel: 1 on CPU, or GPUs."),
        "target-not-opted-in": ("The target family does not relay taps over pipeline stages in this vLLM; vLLM refuses the launch.", "Use an adapter pack that relays them (`ppspec adapters list`), another platform, or pipeline_parallel: 1."),
        "target-opt-in-by-pack": ("The adapter pack's patches make the target relay taps over PP.", "None: information."),
        "target-opt-in-unknown": ("Whether the target relays taps over pipeline stages in this vLLM is not known (vLLM runs the drafter under PP only if the inner decoder opts in).", "Settle it where vLLM is installed: `check --probes` reads the inner decoder's class attribute; or pipeline_parallel: 1."),
        "adapter-unknown": ("`adapter:` names no pack ppspec knows.", "Use a name from `ppspec adapters list`, `auto` or `none`."),
        "adapter-vllm-unverified": ("The pack's patches were verified on other vLLM releases: each applies where its anchor matches the installed code, stands aside where vLLM already has the behaviour, and refuses the engine start where the anchor drifted.", "None if the engine starts; `check --probes` checks every anchor here."),
        "pack-rule-failed": ("An adapter pack's own rules could not load or crashed: what they check was not checked.", "Fix the pack, or report it to its author (the message has the error)."),
        "probes-not-run": ("`check` without `--probes` did not import vLLM: its behaviour probes and the `engine:` option names were not checked.", "`check --probes` runs both; `ppspec serve` always does."),
        "probe-crashed": ("The behaviour probes of the installed vLLM could not run.", "Run `check --no-probes`, and report the message."),
        "probe-<name>": ("A behaviour probe of the installed vLLM failed or did not run (names: see below; a pack's own probes are `probe-<pack>-<name>`).", "The message says what the probe saw and the fix."),
    },
    "Disaggregated prefill/decode (`roles:`)": {
        "pd-names-not-checked": ("The two engines' KV layer names were not compared (the target's layer count is unknown).", "Make the target's config.json readable here."),
        "pd-draft-layer-names": ("The engines name the draft layers differently: the KV connector matches by name, so decode never receives the draft KV.", "Give both engines the same pipeline_parallel, or use a vLLM/pack with global draft layer ids."),
        "pd-draft-layer-collision": ("In one engine, draft layer ids are also target layer names (PP-local numbering): the connector cannot tell them apart.", "`adapter: eagle_global_layer_ids` for EAGLE-1 drafters, or pipeline_parallel: 1 on that engine."),
        "pd-connector-unknown": ("ppspec has no facts about this KV connector: whether it carries PP on each side was not checked.", "Check the connector yourself, or use one ppspec knows (ppspec_cli/knowledge/connectors.py)."),
        "pd-connector-unsuitable": ("The connector is not a KV transfer connector between two engines (the message says why).", "Use NixlConnector, NixlPushConnector or MooncakeConnector."),
        "pd-connector-pp": ("The connector cannot (or may not) serve pipeline parallelism on that engine's side in this vLLM.", "pipeline_parallel: 1 on that role, or a connector that carries PP there."),
        "pd-connector-pcp": ("The connector refuses prefill context parallelism on the decode engine.", "`prefill-context-parallel-size: 1` on the decode engine."),
        "pd-tp-mismatch": ("The engines differ in tensor parallelism and the connector may not map it.", "Use the same TP on both engines."),
        "pd-block-size-mismatch": ("The engines differ in KV block size and the connector may not map it.", "Use the same `block-size` on both engines."),
        "pd-kv-dtype-mismatch": ("The engines differ in KV cache dtype and the connector may not map it.", "Use the same `kv-cache-dtype` on both engines."),
        "pd-hybrid-not-checked": ("Whether the target mixes attention types (which the connector refuses under PP) is unknown: neither its config nor its pack says.", "Check the target's attention types; a hybrid target needs a connector that routes hybrid layers under PP."),
        "pd-hybrid-pp": ("A hybrid-attention target under PP: whether the connector handles it (the message says).", "When refused: pipeline_parallel: 1 on that engine, or a connector that routes hybrid layers by name."),
        "pd-rank-layout": ("How an engine's ranks map to stages (DP x PP x PCP x TP, TP fastest), for connectors and plugins that pair ranks.", "None: information."),
        "pd-port-clash": ("Both engines listen on the same host and port.", "Give `roles.prefill.server` and `roles.decode.server` different ports."),
    },
    "Checkpoints (target-* and drafter-*: the same code for either model)": {},  # filled from CHECKPOINT
    "Adapter packs' own rules (`<pack>-<rule>`)": {},  # filled from each pack's rules module (its CODES)
}

#: Checkpoint problems, reported as `target-<code>` or `drafter-<code>`.
CHECKPOINT: dict[str, tuple[str, str]] = {
    "unreadable": ("The checkpoint could not be read (not found, not cached offline, hub error: the message says which).", "Follow the message's fix (a path, `hf download ...`, network)."),
    "missing-config": ("The checkpoint directory has no config.json.", "Point `model` at the directory that holds config.json."),
    "partial-config": ("The config is marked partial: keys it lacks are unknown, never guessed.", "Use the checkpoint's real config.json."),
    "missing-num-hidden-layers": ("The config has no layer count: no plan can be made.", "Fix the checkpoint's config.json."),
    "missing-hidden-size": ("The config has no hidden size: relay sizes and shape checks are unknown.", "Fix the checkpoint's config.json."),
    "missing-vocab-size": ("The config has no vocabulary size: vocabulary checks are skipped.", "Fix the checkpoint's config.json."),
    "bad-num-hidden-layers": ("The config's layer count is not a plausible positive integer.", "Fix the checkpoint's config.json."),
    "bad-hidden-size": ("The config's hidden size is not a plausible positive integer.", "Fix the checkpoint's config.json."),
    "bad-vocab-size": ("The config's vocabulary size is not a plausible positive integer.", "Fix the checkpoint's config.json."),
    "missing-architectures": ("The config has no `architectures` list: the family and pack cannot be chosen.", "Fix the checkpoint's config.json."),
    "no-weights": ("Metadata only here (no safetensors files): tensor-level checks are not run.", "None on a login node; they run where the weights are."),
    "missing-shards": ("The index names shard files that are not in the directory.", "Download the missing shards, or fix model.safetensors.index.json."),
    "bad-safetensors": ("A safetensors header is corrupt or truncated (or over the format's own 100,000,000-byte ceiling).", "Download the file again."),
    "unsafe-shard-name": ("The index names shard files outside the checkpoint directory (not read).", "Fix model.safetensors.index.json."),
    "index-mismatch": ("The index and the shards disagree on where tensors are (different revisions).", "Download the index and the shards again together."),
    "bad-index": ("model.safetensors.index.json has no usable `weight_map`.", "Restore it from the model repository."),
    "partial-index": ("The index is marked partial: tensor placement is unknown.", "Use the checkpoint's real index."),
    "config-over-read-limit": ("config.json is larger than the limit ppspec reads (MAX_CONFIG_BYTES in checkpoint/reader.py, 20x the largest real config): the model's facts are unknown, no plan is made.", "Check that `model` points at a model; report the size if it is a real config."),
    "over-read-limit": ("A checkpoint file is larger than the limit ppspec reads for its kind (config, index, headers; each limit traced to the largest real file of its kind, in checkpoint/reader.py): what it holds is unknown.", "Nothing to fix in the checkpoint; report the size if it is a real one."),
}


def _contract() -> dict[str, tuple[str, str]]:
    from ppspec_cli.planning.drafter_contract import codes

    return {code: (meaning[0].upper() + meaning[1:] + ".", "Fix the drafter's config or checkpoint as the message says (it names vLLM's rule).") for code, (_sev, meaning) in codes().items()}


def sections() -> dict[str, dict[str, tuple[str, str]]]:
    """Every section with its entries (the drafter contract's from drafter_contract.codes(), the
    checkpoint codes under both roles' prefix)."""
    out = {title: dict(entries) for title, entries in SECTIONS.items()}
    out["Drafter contract (DFlash, DSpark: what vLLM requires of the drafter's config and tensors)"] = _contract()
    out["Checkpoints (target-* and drafter-*: the same code for either model)"] = {f"target-{c}": v for c, v in CHECKPOINT.items()} | {f"drafter-{c}": v for c, v in CHECKPOINT.items()}
    out["Adapter packs' own rules (`<pack>-<rule>`)"] = _pack_codes()
    return out


def _pack_codes() -> dict[str, tuple[str, str]]:
    """The codes the packs' own rules report, documented by each pack next to its rules: the rules
    module's `CODES` ({code: (cause, fix)})."""
    from ppspec_cli.knowledge.packs import load_pack_module, load_packs

    out: dict[str, tuple[str, str]] = {}
    for pack in load_packs():
        for part in pack.parts:
            if part.rules_path is None:
                continue
            try:
                codes = getattr(load_pack_module(part.name, "rules", part.rules_path), "CODES", {})
            except Exception:  # noqa: BLE001 - a broken pack is `pack-rule-failed` in check; here it documents nothing
                continue
            out.update({str(c): (str(v[0]), str(v[1])) for c, v in dict(codes).items()})
    return out


def entry(code: str) -> tuple[str, str] | None:
    """(cause, fix) for a code; a probe's code gets the probe entry."""
    for entries in sections().values():
        if code in entries:
            return entries[code]
    if code.startswith("probe-"):
        return SECTIONS["Platform, vLLM and adapter packs"]["probe-<name>"]
    return None


def reference_markdown(probe_names: list[str]) -> str:
    """docs/findings.md: every section's codes with cause and fix, then the probe names."""
    out = [
        "# Findings reference",
        "",
        "<!-- generated by `ppspec docs --findings --out docs/findings.md`; do not edit by hand -->",
        "",
        "Every code `ppspec check`, `plan` and `serve` report, what it means and what to do. The finding's own",
        "message carries the specifics (which taps, which file, which layer count). Severity depends on the case",
        "(the message says it): an **error** refuses the launch (`check` exits 1, `serve` refuses, `serve --dry-run`",
        "and `export` exit 1), a **warning** asks you to look, an **info** needs nothing from you.",
        "",
    ]
    for title, entries in sections().items():
        out.append(f"## {title}")
        out.append("")
        out.append("| code | cause | fix |")
        out.append("|---|---|---|")
        for code, (cause, fix) in entries.items():
            out.append(f"| `{code}` | {cause.replace('|', chr(92) + '|')} | {fix.replace('|', chr(92) + '|')} |")
        out.append("")
    out.append("## Probe names")
    out.append("")
    out.append("`probe-<name>` for these behaviour probes of the installed vLLM (run by `check --probes` and in every engine process by `serve`):")
    out.append("")
    out += [f"- `probe-{n}`" for n in probe_names]
    return "\n".join(out).rstrip() + "\n"
