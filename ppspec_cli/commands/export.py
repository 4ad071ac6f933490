"""`ppspec export slurm|k8s`: the launch `serve --dry-run` builds, rendered for a scheduler."""

from __future__ import annotations

import sys

from ppspec_cli.commands.common import load, progress
from ppspec_cli.errors import EXIT_USAGE, PpspecError
from ppspec_cli.io import safeio


def slurm(profile: str, output: str | None, offline: bool) -> int:
    from ppspec_cli.running.export import PLACEHOLDER_HEAD, slurm_script

    prof = load(profile)

    def render(r, spec, path, errors, warnings=None):  # the script says what becomes of the profile's own head address
        return slurm_script(r, spec, path, errors, profile_master_addr=prof.launch.master_addr, warnings=warnings)

    return _export(prof, profile, offline, output, render, {"master_addr": PLACEHOLDER_HEAD})


def k8s(
    profile: str,
    image: str,
    output: str | None,
    api_key_secret: str | None,
    host: str | None,
    offline: bool,
    volumes: list[str] | None = None,
) -> int:
    import re

    from ppspec_cli.running.export import K8S_RUN_DIR, PLACEHOLDER_HEAD, check_image, k8s_manifest, k8s_name

    check_image(image)  # before the preflight: a bad value is a usage error, found at once
    if api_key_secret is not None and not re.fullmatch(
        r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?", api_key_secret
    ):  # fullmatch: `$` takes a trailing newline
        raise PpspecError(
            f"--api-key-secret {api_key_secret[:80]!r} is not a Kubernetes Secret name",
            where="--api-key-secret",
            fix="lowercase letters, digits, `-` and `.`",
            exit_code=EXIT_USAGE,
        )
    prof = load(profile)
    if host is None and prof.server.host in ("127.0.0.1", "localhost", "::1"):
        host = "0.0.0.0"  # a pod is reached on its pod IP; loopback would never pass the readiness probe
        progress(
            "the API server binds 0.0.0.0 in the pod (the profile binds loopback, which the Service could not "
            "reach); --host changes it"
        )
    name = k8s_name(prof.name)

    def render(r, spec, path, errors, warnings=None):
        return k8s_manifest(
            r,
            spec,
            path,
            errors,
            image=image,
            api_key_secret=api_key_secret,
            host=host,
            volumes=volumes,
            warnings=warnings,
        )

    return _export(
        prof,
        profile,
        offline,
        output,
        render,
        {"master_addr": PLACEHOLDER_HEAD, "host": host},
        run_dir=str(K8S_RUN_DIR / name),
    )


def _export(prof, profile: str, offline: bool, output: str | None, render, where: dict, run_dir=None) -> int:
    """Build the launch as `serve --dry-run` does (no SLURM environment: the export is for the
    scheduler to fill in), render it, write it. The exit code is the profile verdict (`check`'s):
    1 when it refuses (the file is still written, with the errors in its header). The script runs
    on the scheduler's nodes, not here: this machine's vLLM build and shell do not decide (their
    `ppspec serve` checks their own install and environment)."""
    from ppspec_cli import operation

    if prof.disaggregated:
        raise PpspecError(
            "export writes one engine's launch; this profile runs two (roles prefill and decode)",
            where="roles",
            fix=f"`ppspec serve {profile} --dry-run` prints both engines' launches and the router; export each "
            "role's engine from them",
        )
    o = operation.run(
        operation.Operation(
            "export", profile, operation.PlacementArgs(run_dir=run_dir, **where), offline=offline, profile=prof
        )
    )
    v = o.profile_verdict
    errors = [f"{f.code}: {f.message}" for f in v.refused]
    # every warning check gives (acknowledged risks under `trust:` included) travels with the file
    warnings = [f"{f.code}: {f.message}" for f in o.judgment.findings if f.severity == "warning"]
    text = render(o.resolved, o.launch, profile, errors, warnings)
    if output:
        from pathlib import Path

        safeio.write_text(Path(output), text, what=output, where="--output", through=True)
        progress(f"wrote {output}")
    else:
        sys.stdout.write(text)
    for w in warnings:  # the warnings first: an error, which refuses the profile, is what the screen ends with
        progress(f"check warning {w}")
    for e in errors:
        progress(f"check error {e}")
    if errors:
        progress(f"`check` found {len(errors)} error(s): `ppspec serve` would refuse this profile on every node")
    return o.exit_code
