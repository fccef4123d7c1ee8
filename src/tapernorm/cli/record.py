"""`tapernorm manifest | check-manifest | snapshot | docs`: the commands that record what a run
made, check a result tree against that record, keep a reference run, and regenerate the numbers
the README and docs quote from committed runs."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from .args import allow_dirty_arg

log = logging.getLogger(__name__)

REFERENCE_KINDS = ("results", "cost", "job-times", "dyt-rows")  # blocks quoting one reference run


def _json_object(text: str, option: str, what: str) -> dict:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{option} is not valid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"{option}: {what} must be a JSON object")
    return obj


def _cmd_manifest(args: argparse.Namespace) -> int:
    from ..artifact.manifest import write_manifest
    from ..runtime.out_dirs import json_with
    from ..runtime.out_files import claim_outputs
    from ..workflow.training import family_seeds

    own = lambda path: json_with(path, ("files", "config_sha256"))  # noqa: E731
    claim_outputs([args.out], "manifest", own, args.force)
    config = _json_object(args.config_json, "--config-json", "the workflow config")
    files = _json_object(args.config_file_sha256, "--config-file-sha256", "{path: sha256}")
    manifest = write_manifest(
        args.out, args.files, config, family_seeds(config), args.root, config_files=files
    )
    print(f"{args.out}: {len(manifest['files'])} files, config {manifest['config_sha256'][:12]}")
    return 0


def _cmd_check_manifest(args: argparse.Namespace) -> int:
    from ..artifact.manifest import check_manifest
    from ..machine.env_lock import environment_warning

    ok, problems = check_manifest(args.manifest, args.root)
    for problem in problems:
        print(problem)
    print(f"{args.manifest}: {ok} files match" + (f", {len(problems)} do not" if problems else ""))
    warning = environment_warning(args.manifest)
    if warning:
        log.warning("warning: %s", warning)
    return 1 if problems else 0


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from ..artifact.doc_blocks import repoint
    from ..artifact.reference import snapshot

    dest = snapshot(args.manifest, args.to, args.log, args.conditions)
    print(f"reference run: {dest}")
    if args.docs:
        source = Path(os.path.relpath(dest.resolve(), Path.cwd())).as_posix()
        for path in repoint(Path("."), REFERENCE_KINDS, source):
            print(f"points at it now: {path}")
    return 0


def _cmd_docs(args: argparse.Namespace) -> int:
    from ..artifact.doc_blocks import sync_documents
    from ..artifact.report_captions import sync_captions

    changed, seen = sync_documents(args.repo, check=args.check)
    verb = "differ from their sources" if args.check else "rewritten"
    for path in changed:
        print(f"{path}: generated blocks {verb}")
    print(f"{seen} generated blocks, {len(changed)} documents {verb}")
    captions = sync_captions(args.repo, check=args.check)
    for path in captions:
        print(f"{path}: report caption {verb} (workflow/outputs.py)")
    if args.check and (changed or captions):
        print("run `tapernorm docs` to regenerate them from the committed runs they name")
        return 1
    return 0


def add_subcommands(sub) -> None:
    m = sub.add_parser(
        "manifest",
        help="results/manifest.json: what made a pipeline run and the sha256 of every file",
    )
    m.add_argument("files", nargs="+", type=Path, help="every file the run read or wrote")
    m.add_argument("--config-json", required=True, help="the validated workflow config")
    m.add_argument(
        "--config-file-sha256",
        default="{}",
        help='the config files given, as JSON {"path": "sha256 of its bytes"} (the workflow '
        "passes provenance.config_file_hashes of Snakemake's config files)",
    )
    m.add_argument("--out", type=Path, required=True, help="e.g. results/manifest.json")
    m.add_argument("--root", type=Path, default=Path("."), help="the files' paths are relative to")
    m.add_argument(
        "--force", action="store_true", help="replace an --out that is not an earlier manifest"
    )
    allow_dirty_arg(m)
    m.set_defaults(func=_cmd_manifest)

    c = sub.add_parser(
        "check-manifest",
        help="check a result tree (or a copy of it) against its manifest; exit 1 naming every "
        "file that changed or is missing",
    )
    c.add_argument("manifest", type=Path, help="e.g. results/manifest.json")
    c.add_argument(
        "--root", type=Path, help="where the tree lies (default: as the manifest records it)"
    )
    c.set_defaults(func=_cmd_check_manifest)

    s = sub.add_parser(
        "snapshot",
        help="keep a finished run's summary as a committed reference run "
        "(results/reference/<host>-<commit>/), after checking it against its manifest",
    )
    s.add_argument("--manifest", type=Path, default=Path("results/manifest.json"))
    s.add_argument("--to", type=Path, help="default: results/reference/<host>-<commit>")
    s.add_argument("--log", type=Path, help="the run's Snakemake log (default: the latest)")
    s.add_argument(
        "--conditions", default="", help="how it ran, e.g. 'a fresh clone on an idle machine'"
    )
    s.add_argument(
        "--docs",
        action="store_true",
        help="point the README's and docs' reference-run blocks at it and regenerate them",
    )
    s.set_defaults(func=_cmd_snapshot)

    d = sub.add_parser(
        "docs",
        help="regenerate the README's and docs' blocks of numbers from the committed runs they "
        "name, and the report's captions (workflow/report/<name>.rst) from workflow/outputs.py; "
        "--check: exit 1 if any differs",
    )
    d.add_argument("--check", action="store_true", help="compare only")
    d.add_argument("--repo", type=Path, default=Path("."), help="the checkout")
    d.set_defaults(func=_cmd_docs)
