"""Fold a finished run at g = 0 and verify the fold (`tapernorm fold`, rule fold): OUT/folded,
OUT/scaled and OUT/verify.json. The fold itself is tapernorm.fold's."""

from __future__ import annotations

import logging
from pathlib import Path

from ..data import TokenShards
from ..fold import FOLD_RTOL, export_explicit_scaling, fold_model, verify_fold
from ..norms import set_gate
from ..runtime.device import resolve_device
from ..runtime.out_dirs import claim_dir, json_with, refuse_inside
from .checkpoint import load_model, save_model, write_json
from .divergence import diverged
from .evaluation import check_vocab, evaluate
from .identity import MODEL_FILES

log = logging.getLogger(__name__)

EXPORTS = ("folded", "scaled")  # what fold_run writes beside verify.json, one model directory each


def is_fold_dir(out: Path) -> bool:
    """Whether `out` holds fold_run's earlier output: its verify.json, or (Snakemake deletes
    verify.json before a rerun) only folded/ and scaled/ with nothing but model files in them."""
    if json_with(out / "verify.json", ("model", "written")):
        return True
    return all(
        p.name in EXPORTS and p.is_dir() and all(f.name in MODEL_FILES for f in p.iterdir())
        for p in out.iterdir()
    )


def fold_run(
    model_dir: str | Path,
    data: str | Path,
    out: str | Path,
    windows: int = 8,
    eval_windows: int = 64,
    rtol: float = FOLD_RTOL,
    device: str = "auto",
    force: bool = False,
) -> dict:
    """Export the g = 0 model of a run (or model) directory as explicit scaling and folded, verify
    both against it on `windows` validation windows of token shards `data` (raises beyond `rtol`),
    compare validation losses on `eval_windows`, and write OUT/folded, OUT/scaled and
    OUT/verify.json (last: its presence means the check ran). Returns the verify report, whose
    `written` lists the model files beside it.

    A run whose eval.json says it diverged is not folded: its weights are those it rolled back to,
    not a trained model. verify.json then records `skipped` (divergence.Diverged.reason), and
    OUT/folded and OUT/scaled are left empty (earlier exports in them removed).

    OUT equal to or inside the model or the data, or holding files of something else (unless
    `force`: then only fold's files are replaced), is refused (out_dirs.PathInUse)."""
    out = Path(out)
    refuse_inside(out, {"model directory (--model)": model_dir, "token shards (--data)": data})
    claim_dir(out, "fold", is_fold_dir, force)
    bad = diverged(model_dir)
    if bad is not None:
        for name in EXPORTS:
            (out / name).mkdir(parents=True, exist_ok=True)
            for file in MODEL_FILES:  # (an earlier export's; nothing else in it)
                (out / name / file).unlink(missing_ok=True)
        report = {
            "model": str(model_dir),
            "skipped": bad.reason(),
            "diverged_step": bad.step,
            "weights_step": bad.weights_step,
            "written": [],
        }
        write_json(out / "verify.json", report)
        log.warning("fold: %s: skipped, nothing folded", bad.reason())
        return report
    dev = resolve_device(device)
    model = load_model(model_dir, dev).eval()
    set_gate(model, 0.0)
    folded, scaled = fold_model(model), export_explicit_scaling(model)
    shards = TokenShards(data)
    check_vocab(shards, model, model_dir)
    x, y = shards.val_windows(windows, model.config.block_size)
    x, y = x.to(dev), y.to(dev)
    report = {"model": str(model_dir), "rtol": rtol}
    for name, exported in (("folded", folded), ("scaled", scaled)):
        report[name] = verify_fold(model, exported, x, y, rtol=rtol)  # raises beyond tolerance
    val_ref = evaluate(model, shards, eval_windows, 16)
    val_folded = evaluate(folded, shards, eval_windows, 16)
    report["val_loss_reference"], report["val_loss_folded"] = val_ref, val_folded
    report["val_loss_diff"] = val_folded - val_ref
    save_model(folded, out / "folded", {"source": str(model_dir), "export": "folded"})
    save_model(scaled, out / "scaled", {"source": str(model_dir), "export": "explicit scaling"})
    report["written"] = [f"{name}/{f}" for name in EXPORTS for f in MODEL_FILES]
    write_json(out / "verify.json", report)
    return report
