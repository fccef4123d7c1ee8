"""The Snakemake report's captions, generated: workflow/report/<name>.rst of every registered
output (workflow/outputs.py), written by `tapernorm docs` and checked by `tapernorm docs --check`.
Edit a caption in the registry, never in its .rst."""

from __future__ import annotations

from pathlib import Path

from ..runtime.atomic import atomic_write_bytes
from ..workflow.outputs import OUTPUTS, REPORT_DIR


def sync_captions(repo: Path, check: bool = False) -> list[Path]:
    """Rewrite (with `check`: only compare) each output's caption file in `repo`; returns those
    that changed (differ). A tree without workflow/report/ (not a checkout) has none."""
    if not (repo / REPORT_DIR).is_dir():
        return []
    changed = []
    for output in OUTPUTS:
        path = repo / output.caption_path()
        text = output.report_caption()
        if not path.is_file() or path.read_text() != text:
            changed.append(path)
            if not check:
                atomic_write_bytes(path, text.encode())
    return changed
