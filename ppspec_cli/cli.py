"""The `ppspec` command line. Commands only wire the rooms together and render results."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from ppspec_cli.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, PpspecError
from ppspec_cli.io import env as env_io
from ppspec_cli.io import terminal

app = typer.Typer(
    name="ppspec",
    help=(
        "Run EAGLE3-family speculative decoding (eagle3, dflash, dspark; also mtp, eagle) under "
        "pipeline parallelism on vLLM, checked before launch.\n\n"
        "Typical flow: `ppspec check PROFILE` (preflight, no GPU), `ppspec plan PROFILE` (stage plan), "
        "`ppspec serve PROFILE` (launch), `ppspec verify PROFILE` (measure acceptance on the live server), `ppspec "
        "bench PROFILE` (does speculation pay at each concurrency: both arms, a verdict).\n\n"
        "Exit codes: 0 ok; 1 a check, launch or gate failed (or the server/engine failed); 2 bad usage or "
        "unreadable input (profile, option value, file); 3 an internal error (a ppspec bug: re-run with --debug "
        "and report it); 4 serve could not confirm ppspec's plugin in every engine process (stopped, nothing served "
        "unpatched); 128+N (130 Ctrl-C, 143 SIGTERM) serve interrupted by signal N."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
adapters_app = typer.Typer(
    help="Adapter packs: which model families work under PP, and what each pack changes.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(adapters_app, name="adapters")
export_app = typer.Typer(
    help="Write the profile's launch for a cluster scheduler: a SLURM batch script or a Kubernetes LeaderWorkerSet.",
    no_args_is_help=True,
)
app.add_typer(export_app, name="export")

_state = {"debug": False}


def _version_callback(value: bool) -> None:
    if value:
        from ppspec_cli.commands.version import print_version

        print_version()
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for unexpected errors."),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version_callback,
        is_eager=True,
        help="Print ppspec's version, the installed vLLM (verified or not) and the verified vLLM releases, then exit.",
    ),
) -> None:
    _state["debug"] = debug or bool(
        env_io.get("PPSPEC_DEBUG")
    )  # read raw: a bad PPSPEC_* below must still show without a traceback
    from ppspec_cli.io.settings import settings

    settings()  # every PPSPEC_* variable checked once, first: a bad one is one error (exit 2) before anything runs


_HARDWARE_HELP = (
    "The accelerator one GPU is (over the profile's `hardware:`): h100, h200, a100, l40s, or NAME,mem=GiB; "
    "judges weights per GPU and the KV cache per stage (docs/memory.md)."
)


@app.command()
def check(
    profile: str = typer.Argument(..., metavar="PROFILE", help="Path to the profile YAML (see profiles/)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object (for scripts) instead of a table."),
    offline: bool = typer.Option(
        False, "--offline", help="Do not contact the Hugging Face hub; use local files and the HF cache only."
    ),
    probes: bool = typer.Option(
        False,
        "--probes/--no-probes",
        help="Also run behaviour probes of the installed vLLM (tripwires). Imports vLLM: tens of seconds. `serve` "
        "runs them inside every engine process anyway.",
    ),
    severity: str = typer.Option(
        "warning",
        "--severity",
        metavar="LEVEL",
        help="Show findings of this severity or worse: error, warning (the default) or info (all). The verdict and "
        "--json always count every finding.",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="Errors and warnings only (the default; kept for scripts)."),
    verbose: bool = typer.Option(False, "--verbose", help="Every finding, the infos too (--severity info)."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help=_HARDWARE_HELP),
) -> None:
    """Preflight a profile: read the checkpoints' metadata and the installed vLLM, report every problem.

    Exit code: 0 when the profile launches on the platform and vLLM it declares (no error finding), 1
    when it does not, 2 on usage errors; what this machine adds (would `serve` start it here) is its
    own section. Every finding code is explained in `ppspec docs --findings` (docs/findings.md).
    """
    from ppspec_cli.commands import check as command

    raise typer.Exit(
        command.run(
            profile,
            json_out,
            offline,
            probes,
            "warning" if quiet and severity == "info" else severity,
            verbose,
            hardware,
        )
    )


@app.command()
def plan(
    profile: str = typer.Argument(..., metavar="PROFILE", help="Path to the profile YAML."),
    json_out: bool = typer.Option(False, "--json", help="Print the plan and findings as one JSON object."),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub."),
    verbose: bool = typer.Option(
        False, "--verbose", help="Every finding under the plan (default: the verdict and the errors to act on first)."
    ),
    predict: bool = typer.Option(
        False,
        "--predict",
        help="Also predict speculation's speed-up per concurrency and k from a cost model (docs/predict.md).",
    ),
    hardware: Optional[str] = typer.Option(
        None,
        "--hardware",
        help=_HARDWARE_HELP + " With --predict also the speed model's: NAME,bw=GB/s,tflops=N.",
    ),
    link: Optional[str] = typer.Option(
        None,
        "--link",
        help="With --predict: the pipeline link (nvlink4, pcie5, ib-ndr, tcp-100g, ...; NAME,bw=GB/s,lat=us).",
    ),
    acceptance_length: Optional[float] = typer.Option(
        None,
        "--acceptance-length",
        help="With --predict: mean acceptance length at the profile's num_speculative_tokens.",
    ),
    acceptance_from: Optional[str] = typer.Option(
        None,
        "--acceptance-from",
        help="With --predict: read per-position acceptance from a bench.json or verify report.",
    ),
    concurrency: str = typer.Option(
        "1,4,16,32", "--concurrency", help="With --predict: concurrency levels, comma-separated."
    ),
    nst: Optional[str] = typer.Option(
        None,
        "--num-speculative-tokens",
        help="With --predict: k values, comma-separated (default 1,2,3 and the profile's).",
    ),
    context_length: Optional[int] = typer.Option(
        None,
        "--context-length",
        min=1,
        max=1 << 24,
        help="With --predict: tokens of context per request (default min(1024, max-model-len)).",
    ),
    calibration: Optional[str] = typer.Option(
        None,
        "--calibration",
        help="With --predict: calibration file (default: calibration.json beside the profile, if it matches).",
    ),
    prompt_len: Optional[int] = typer.Option(
        None,
        "--prompt-len",
        min=1,
        max=1048576,
        help="With --predict and --output-len: each request's prompt tokens; the speed-up then counts each wave's "
        "prefill, as bench measures it (default: decode only).",
    ),
    output_len: Optional[int] = typer.Option(
        None,
        "--output-len",
        min=1,
        max=1048576,
        help="With --predict and --prompt-len: tokens each request generates.",
    ),
) -> None:
    """Show the stage plan: layers per stage, where each tap lives, what each hop relays, draft layer
    ids, embedding placement and weight memory per stage; exit code as `check`'s. With --predict, the predicted
    speed-up."""
    from ppspec_cli.commands import plan as command
    from ppspec_cli.commands.predict_render import PredictOptions, options

    opts = options(
        predict,
        PredictOptions(
            hardware,
            link,
            acceptance_length,
            acceptance_from,
            concurrency,
            nst,
            context_length,
            calibration,
            prompt_len,
            output_len,
        ),
    )
    raise typer.Exit(command.run(profile, json_out, offline, opts, verbose, hardware))


@app.command()
def serve(
    profile: str = typer.Argument(
        ..., metavar="PROFILE", help="Path to the profile YAML (e.g. profiles/tiny_cpu_demo.yaml)."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Print the exact command lines and environment for every node, then exit. Needs neither vLLM nor GPUs.",
    ),
    node_rank: Optional[int] = typer.Option(
        None,
        "--node-rank",
        min=0,
        max=4095,
        help="Which node this is (multi-node). Default 0 (the head); with --dry-run, default all nodes.",
    ),
    json_out: bool = typer.Option(False, "--json", help="With --dry-run: print the launch as JSON."),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub during the preflight."),
    run_dir: Optional[str] = typer.Option(
        None,
        "--run-dir",
        help="Where to keep plan.json, launch.json and engine.log (default ~/.cache/ppspec/runs/NAME).",
    ),
    health_timeout: Optional[int] = typer.Option(
        None,
        "--health-timeout",
        min=1,
        max=86400,
        help="Seconds to wait for /health (default: launch.health_timeout_s).",
    ),
    master_addr: Optional[str] = typer.Option(
        None,
        "--master-addr",
        help="The head node's address (overrides launch.master_addr; inside SLURM the allocation's first host is the "
        "default).",
    ),
    master_port: Optional[int] = typer.Option(
        None, "--master-port", min=1, max=65535, help="The head's rendezvous port (overrides launch.master_port)."
    ),
    host: Optional[str] = typer.Option(None, "--host", help="Address the API server binds (overrides server.host)."),
    role: Optional[str] = typer.Option(
        None,
        "--role",
        help="Disaggregated profiles (`roles:`): which engine to start, `prefill` or `decode`. With --dry-run and no "
        "--role, both engines and the router.",
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        help="Stream the engine's whole log to the terminal (default: a line per start-up phase and vLLM's warnings "
        "and errors; RUN_DIR/engine.log always has all of it).",
    ),
) -> None:
    """Check the profile, then launch the vLLM server with the adapter pack applied in every engine process.

    Refuses to start when `check` finds an error. Waits for /health, prints where it listens and a
    curl line, streams the engine log, and on Ctrl-C / SIGTERM stops the whole process tree.

    Exit code: 0 the dry run printed a launch of a profile `check` passes (its JSON `ok` says whether
    `serve` would start it on this machine; a real serve runs until it is stopped); 1 a check or launch failed: refused
    (the reasons are printed; `check` reports them
    too), or the engine failed (exited, never became healthy, port taken, a node lost); 2 usage
    errors or unreadable input; 3 an internal error (a ppspec bug: --debug shows it); 4 the engine
    started but not every engine process confirmed an ok ppspec plugin status (API server, engine
    core, and every worker through the engine core): the engine was stopped (docs/architecture.md);
    130 stopped by Ctrl-C, 143 by SIGTERM, 129 by SIGHUP (128+N for signal N, while serving after a
    clean shutdown or before the engine was ready).
    """
    from ppspec_cli.commands import serve as command

    where = {"master_addr": master_addr, "master_port": master_port, "host": host}
    raise typer.Exit(
        command.run(profile, dry_run, node_rank, json_out, offline, run_dir, health_timeout, where, role, verbose)
    )


@app.command()
def bench(
    profile: str = typer.Argument(
        ..., metavar="PROFILE", help="Profile with a drafter (e.g. profiles/tiny_cpu_demo.yaml)."
    ),
    concurrency: str = typer.Option(
        "1,4,16,32", "--concurrency", help="Concurrency levels (requests in flight), comma-separated."
    ),
    num_prompts: int = typer.Option(
        16,
        "--num-prompts",
        help="Seeded random prompts per level, at least (a level at concurrency C sends at least 4 x C).",
    ),
    repeat: int = typer.Option(
        2, "--repeat", help="Measure each (arm, level) this many times; the verdict judges the spread (use 3 on GPUs)."
    ),
    sessions: str = typer.Option(
        "per-repeat",
        "--sessions",
        help="per-repeat: every repeat of every arm in its own engine session, arms interleaved (drift between "
        "sessions is in the spread); per-arm: one session per arm (fewer engine starts).",
    ),
    max_tokens: int = typer.Option(
        128, "--max-tokens", help="Output tokens per request (greedy, ignore_eos: a fixed length)."
    ),
    input_len: int = typer.Option(128, "--input-len", help="Prompt length in tokens."),
    nst: Optional[str] = typer.Option(
        None,
        "--num-speculative-tokens",
        help="Speculative arms, comma-separated (default: the profile's num_speculative_tokens).",
    ),
    out: Optional[str] = typer.Option(
        None,
        "--out",
        help="Directory for bench.json, report.md and the PNG plots (also the --resume state; default "
        "~/.cache/ppspec/runs/NAME-bench).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Keep the levels and parity passes measured earlier (same settings) and run only the rest.",
    ),
    endpoint: Optional[str] = typer.Option(
        None,
        "--endpoint",
        help="Measure this running speculative server instead of serving the profile (with --baseline-endpoint).",
    ),
    baseline_endpoint: Optional[str] = typer.Option(
        None, "--baseline-endpoint", help="The running server without speculation (with --endpoint)."
    ),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub."),
    allow_mixed: bool = typer.Option(
        False,
        "--allow-mixed",
        help="With --resume, keep results measured on another host or with other ppspec/vLLM versions (refused "
        "otherwise).",
    ),
) -> None:
    """Does speculation pay at my load? Serves the profile without its drafter and with each
    num_speculative_tokens (one engine at a time, as `serve`), drives every concurrency with vLLM's
    benchmark client --repeat times, derives a dynamic-speculation schedule and measures it (the
    `tuned` arm), checks greedy parity, judges each level against the noise, recommends the best
    measured configuration.

    Exit code: 0 every run done and parity identical; 1 parity differs, a run is missing, or an
    engine / the load generator failed; 2 usage (also: --resume over results from another host or
    version without --allow-mixed); 4 as `serve`; 128+N interrupted (results kept: --resume).
    """
    from ppspec_cli.commands import bench as command

    raise typer.Exit(
        command.run(
            profile,
            command.Options(
                concurrency=concurrency,
                num_prompts=num_prompts,
                max_tokens=max_tokens,
                input_len=input_len,
                nst=nst,
                out=out,
                json_out=json_out,
                resume=resume,
                endpoint=endpoint,
                baseline_endpoint=baseline_endpoint,
                offline=offline,
                repeat=repeat,
                allow_mixed=allow_mixed,
                sessions=sessions,
            ),
        )
    )


_OUTPUT_HELP = "Write to this file instead of standard output."


@export_app.command("slurm")
def export_slurm(
    profile: str = typer.Argument(..., metavar="PROFILE", help="Path to the profile YAML."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=_OUTPUT_HELP),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub during the preflight."),
) -> None:
    """An sbatch script: one srun task per node runs `ppspec serve PROFILE`, the head is the allocation's first host.

    Submit with `sbatch FILE`; extra arguments go to every node's `ppspec serve`. The job fails when
    any node fails. Exit code: 0 written; 1 `check` found errors (written anyway) or the profile cannot be exported.
    """
    from ppspec_cli.commands import export as command

    raise typer.Exit(command.slurm(profile, output, offline))


@export_app.command("k8s")
def export_k8s(
    profile: str = typer.Argument(..., metavar="PROFILE", help="Path to the profile YAML."),
    image: str = typer.Option(
        ..., "--image", help="Container image with vLLM and ppspec installed (the same versions on every node)."
    ),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=_OUTPUT_HELP),
    api_key_secret: Optional[str] = typer.Option(
        None,
        "--api-key-secret",
        help="Secret holding the API key under `api-key` (default NAME-api-key); used when server.api_key_env is set.",
    ),
    host: Optional[str] = typer.Option(
        None,
        "--host",
        help="Address the API server binds in the pod (default: the profile's, or 0.0.0.0 when that is loopback).",
    ),
    volume: Optional[list[str]] = typer.Option(
        None,
        "--volume",
        help="CLAIM:/path: mount this PersistentVolumeClaim read-only at /path in every pod (repeatable); the "
        "profile's local model paths must lie under one.",
    ),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub during the preflight."),
) -> None:
    """A Kubernetes LeaderWorkerSet: node 0 (leader) serves the API, the others run headless.

    Every pod runs `ppspec serve` on the profile (in a ConfigMap), as each node does under SLURM; the
    head's address and each worker's rank come from LWS's LWS_LEADER_ADDRESS / LWS_WORKER_INDEX. Apply with
    `kubectl apply -f FILE`. Exit code: 0 written; 1 `check` found errors (written anyway) or the profile cannot be
    exported.
    """
    from ppspec_cli.commands import export as command

    raise typer.Exit(command.k8s(profile, image, output, api_key_secret, host, offline, volume))


@app.command()
def verify(
    profile: Optional[str] = typer.Argument(
        None, metavar="PROFILE", help="Profile of the server to measure (its host/port/api key). Omit with --endpoint."
    ),
    endpoint: Optional[str] = typer.Option(
        None,
        "--endpoint",
        help="Base URL of a running OpenAI-compatible vLLM server (default: from the profile, else "
        "http://127.0.0.1:8000).",
    ),
    out: Optional[str] = typer.Option(None, "--out", help="Write the JSON report here."),
    save_baseline: Optional[str] = typer.Option(
        None, "--save-baseline", help="Save this run as an acceptance baseline (e.g. the same drafter at PP=1)."
    ),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Baseline report for the acceptance-parity gate."),
    reference: Optional[str] = typer.Option(
        None, "--reference", help="Saved speculation-off run for the output-parity and task-score gates."
    ),
    save_reference: Optional[str] = typer.Option(
        None, "--save-reference", help="Save this run as the reference (run it with speculation off)."
    ),
    gate: Optional[list[str]] = typer.Option(
        None,
        "--gates",
        help="Gates to apply, comma-separated or repeated: acceptance (parity vs --baseline), drafter (acceptance "
        "floor), output (greedy outputs vs --reference), task (arithmetic score vs --reference), all, none. "
        "Default: drafter when speculating, plus those whose inputs are given.",
    ),
    min_acceptance: float = typer.Option(
        0.05, "--min-acceptance", help="Floor for the drafter-sanity gate (acceptance rate)."
    ),
    parity_ratio: float = typer.Option(
        0.95,
        "--parity-ratio",
        help="Acceptance length must be at least this times the baseline's (upstream vLLM uses 0.95).",
    ),
    max_tokens: Optional[int] = typer.Option(
        None,
        "--max-tokens",
        help="Tokens generated per prompt (greedy). Default: the profile's verify.max_tokens, else 128.",
    ),
    num_prompts: Optional[int] = typer.Option(
        None,
        "--num-prompts",
        help="Use only the first N prompts of the set. Default: the profile's verify.num_prompts, else all.",
    ),
    api_key_env: Optional[str] = typer.Option(
        None,
        "--api-key-env",
        help="Environment variable holding the API key (default: the profile's server.api_key_env).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
) -> None:
    """Measure speculative decoding on a live server: acceptance from /metrics deltas, throughput,
    and pass/fail gates (non-zero exit when a gate fails)."""
    from ppspec_cli.commands.verify import Options, verify_command

    raise typer.Exit(
        verify_command(
            Options(
                profile=profile,
                endpoint=endpoint,
                out=out,
                save_baseline=save_baseline,
                baseline=baseline,
                reference=reference,
                save_reference=save_reference,
                gates=gate,
                min_acceptance=min_acceptance,
                parity_ratio=parity_ratio,
                max_tokens=max_tokens,
                num_prompts=num_prompts,
                api_key_env=api_key_env,
                json_out=json_out,
            )
        )
    )


@app.command()
def docs(
    key: Optional[str] = typer.Argument(
        None,
        metavar="KEY",
        help="One profile key (drafter.taps), a section (topology) or a finding code (taps-default): just that entry.",
    ),
    out: Optional[str] = typer.Option(None, "--out", help="Write the reference as Markdown to this file instead."),
    findings: bool = typer.Option(
        False,
        "--findings",
        help="The findings reference instead: every finding code, its cause and fix (docs/findings.md).",
    ),
    markdown: bool = typer.Option(
        False, "--markdown", help="Print the Markdown (what --out writes) instead of the terminal view."
    ),
) -> None:
    """Print the profile reference (generated from the schema's field descriptions) for a terminal,
    paged when longer than the screen; with --findings the reference of every finding code; with
    KEY one key, section or code."""
    from ppspec_cli.commands import docs as command

    raise typer.Exit(command.run(out, findings, key=key, markdown=markdown))


@adapters_app.command("list")
def adapters_list_cmd(
    json_out: bool = typer.Option(
        False, "--json", help="Print one JSON object: the packs and the per-release architecture tables."
    ),
    details: bool = typer.Option(
        False,
        "--details",
        help="Every pack's status reason, engine state, targets, drafters and vLLM range, and vLLM's facts per "
        "release.",
    ),
) -> None:
    """List adapter packs, one line each, and their status against the installed vLLM (without one:
    the newest verified release, as `check` judges)."""
    from ppspec_cli.commands.adapters import adapters_list

    raise typer.Exit(adapters_list(json_out, details=details))


@adapters_app.command("show")
def adapters_show_cmd(
    name: str = typer.Argument(
        ...,
        metavar="NAME",
        help="Pack name (see `ppspec adapters list`), or a model architecture as its config.json names it: the pack "
        "that covers it.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the pack as one JSON object."),
) -> None:
    """Show one adapter pack: what it matches, provides and patches. Given an architecture name,
    say which pack covers it and show that pack."""
    from ppspec_cli.commands.adapters import adapters_show

    raise typer.Exit(adapters_show(name, json_out))


def main() -> None:
    """Entry point: one clear message for user errors, a traceback only with --debug."""
    terminal.install()  # every byte ppspec prints is cleaned (io.terminal) and redacted (io.redact)
    try:
        rc = app(prog_name="ppspec", standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except PpspecError as e:
        if _state["debug"]:
            raise
        if "--json" in sys.argv:
            print(json.dumps({"ok": False, **e.to_json()}, indent=2))
        from ppspec_cli.commands.common import print_error

        print_error(e)
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("ppspec: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except OSError as e:
        import errno

        if e.errno not in (errno.ENAMETOOLONG, errno.ELOOP) or _state["debug"]:
            raise
        # a path given on the command line or in the profile that the file system cannot take
        where = str(e.filename or "")
        print(
            f"error: {e.strerror}\n  where: {where[:120]}{'...' if len(where) > 120 else ''}\n  fix: use a shorter "
            "path (each name at most 255 bytes)",
            file=sys.stderr,
        )
        sys.exit(EXIT_USAGE)
    except typer.Abort:
        print("ppspec: aborted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:  # usage errors (typer's, public base class) and the unexpected
        if isinstance(e, typer.TyperException) and callable(getattr(e, "show", None)):
            import io

            buf = io.StringIO()
            e.show(file=buf)  # click's usage, hint and error, wrapped between words as ppspec's own
            print(terminal.wrap_block(buf.getvalue().rstrip("\n"), terminal.wrap_width()), file=sys.stderr)
            sys.exit(EXIT_USAGE)
        if _state["debug"]:
            raise
        print(
            f"error: unexpected {type(e).__name__}: {e}\n  fix: re-run with --debug for the traceback and report it",
            file=sys.stderr,
        )
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
