"""Export a finished run to Hugging Face transformers (`tapernorm export-hf`), and the taper-hf
recipe (`tapernorm taper-hf`): import a HF model with every norm tapered, fine-tune it through the
taper, fold-verify and export. The export itself is tapernorm.interop.hf_export's."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from ..config import resolve_run_config
from ..config.run import RunConfig
from ..data import TokenShards
from ..data.shards import read_meta
from ..fold import FOLD_RTOL, fold_model, verify_fold
from ..interop.hf_export import (
    claim_export_dir,
    export_hf,
    is_export_dir,
    is_export_file,
    remove_leftovers,
)
from ..interop.hf_import import load_hf
from ..probe import BatterySettings, card_entries, probe_models
from ..runtime import bookkeeping, jsonio
from ..runtime.out_dirs import claim_dir, install_dir, make_aside, refuse_inside
from ..variants import PROTOCOLS, VARIANTS
from .checkpoint import load_model, write_json
from .divergence import diverged
from .evaluation import check_vocab
from .lock import export_lock
from .loop import train

log = logging.getLogger(__name__)


def _tokenizer(data_dir: Path) -> tuple[object | None, Path | None, str]:
    """(HF tokenizer or None, SentencePiece model file or None, description) of a shards dir."""
    from ..data.tokenizers import _gpt2_files, load_tokenizer

    meta = read_meta(data_dir)
    kind = meta.get("tokenizer", {}).get("kind")
    if kind == "gpt2" and _gpt2_files() is not None:
        import transformers

        vocab_bpe, encoder_json = _gpt2_files()
        merges = [tuple(line.split()) for line in vocab_bpe.read_text("utf-8").splitlines()[1:]]
        vocab = jsonio.read_json(encoder_json)
        tok = transformers.GPT2Tokenizer(vocab=vocab, merges=[m for m in merges if m])
        return tok, None, "GPT-2 BPE (saved here; AutoTokenizer.from_pretrained loads it)"
    if kind == "sentencepiece":
        sp = Path(load_tokenizer(meta, str(data_dir)).model_path)
        return None, sp, "SentencePiece, tokenizer.model here (load with sentencepiece)"
    return None, None, f"{kind} (not saved; tokenize as the training data {data_dir} was)"


def export_run(
    model_dir: str | Path,
    out: str | Path,
    data: str | Path | None = None,
    windows: int = 4,
    rtol: float = 1e-4,
    device: str = "cpu",
    route: str = "tapernorm export-hf",
    fold: dict | None = None,
    force: bool = False,
    card_from: Callable[[Path], dict] | None = None,
) -> dict:
    """export_hf of a run (or model) directory, verified on validation windows of its token shards
    (`data`, default the run's data.dir) when they exist; card and tokenizer from the run. The
    card names the export `route` and the fold check `fold` (verify_fold's report) if one ran,
    and takes the entries `card_from` returns (export_hf's; taper-hf's tails probe).

    A run whose eval.json says it diverged is not exported: OUT then holds only verify.json, which
    records `skipped` (divergence.Diverged.reason). OUT equal to or inside the model or the data
    directory, or holding files of something else (unless `force`), is refused (PathInUse).
    One export into OUT at a time (lock.export_lock: a second is refused, RunLocked); under the
    lock, what a killed export into OUT left beside it is removed first (remove_leftovers)."""

    model_dir, out = Path(model_dir), Path(out)
    refuse_inside(out, {"model directory (--model)": model_dir, "token shards (--data)": data})
    with export_lock(out):  # one export into `out` at a time; its leftovers are its own
        claim_export_dir(out, force)
        remove_leftovers(out)
        return _export(model_dir, out, data, windows, rtol, device, route, fold, card_from)


def _export(model_dir, out, data, windows, rtol, device, route, fold, card_from) -> dict:
    """export_run's export, under its lock, into a claimed `out`."""
    bad = diverged(model_dir)
    if bad is not None:
        return skip_export(out, model_dir, bad.reason())
    model = load_model(model_dir, device).eval()
    cfg = bookkeeping.read(bookkeeping.MODEL_CONFIG, model_dir / "config.json")
    outcome = run_outcome(model_dir)
    data = Path(data or cfg.get("data", {}).get("dir") or model_dir / "no-data")
    tokens = targets = tokenizer = sp_model = None
    tokenizer_note = "unknown (no token shards given)"
    if (data / "meta.json").is_file():
        shards = TokenShards(data)
        check_vocab(shards, model, model_dir)
        tokens, targets = shards.val_windows(windows, model.config.block_size)
        tokenizer, sp_model, tokenizer_note = _tokenizer(data)
    meta = cfg.get("meta", {})
    variant = meta.get("protocol") or cfg.get("variant")
    label = {**VARIANTS, **PROTOCOLS}.get(variant, {}).get("label", variant)
    source = (cfg.get("init") or {}).get("from")
    card = {
        "name": cfg.get("name", model_dir.name),
        "source run": str(model_dir),
        "base model": source or "none: random init, trained here",
        "hub id": _hub_id(source),
        "source architecture": (model.config.hf_config or {}).get("model_type", "none (by style)"),
        "variant": label or f"taper={model.config.taper}",
        "taper schedule": taper_schedule_text(cfg, model.config.taper),
        "steps": outcome.get("steps", "unknown"),
        "validation loss (g=0)": loss_text(outcome),
        "tokenizer": tokenizer_note,
        "fold check": fold_check_text(fold),
        "export route": route,
    }
    report = export_hf(
        model, out, tokens, targets, rtol, tokenizer, card, force=True, card_from=card_from
    )
    if sp_model is not None:
        shutil.copyfile(sp_model, Path(out) / "tokenizer.model")
    return report


def run_outcome(model_dir: Path) -> dict:
    """The run's eval.json, read as its kind (bookkeeping.RUN_RESULT: a NaN or Infinity token, which
    tapernorm never writes, is an error naming the file); {} for a model directory without one."""
    path = model_dir / "eval.json"
    if not path.exists() and not path.is_symlink():
        return {}
    return bookkeeping.read(bookkeeping.RUN_RESULT, path)


def loss_text(outcome: dict) -> object:
    """The validation loss of a run's eval.json for the card: the number, or a non-finite one as
    the event it is (eval.json's null, named under non_finite), or unknown."""
    if "val_loss" not in outcome:
        return "unknown"
    value = outcome["val_loss"]
    if value is not None:
        return value
    spelled = (outcome.get(jsonio.NON_FINITE) or {}).get("val_loss")
    return f"not finite ({spelled})" if spelled else "not measured"


def _hub_id(source: str | None) -> str | None:
    """The Hub id of an `init.from` that names one (hf:ID, not a local directory), else None."""
    if not source or not source.startswith("hf:") or Path(source[3:]).exists():
        return None
    return source[3:]


def taper_schedule_text(cfg: dict, taper: str) -> str:
    """The gate schedule of a run config in words (tapernorm.schedules.gate_at)."""
    tp, steps = cfg.get("taper") or {}, (cfg.get("train") or {}).get("steps")
    if taper == "none" or tp.get("start") is None or tp.get("end") is None:
        return f"norms tapered: {taper}; schedule unknown (not in the run's config)"
    return (
        f"norms tapered: {taper}; gate g = 1 to step {tp['start']} (c calibrates), cosine to "
        f"g = 0 at step {tp['end']}, g = 0 to the last step ({steps})"
    )


def fold_check_text(fold: dict | None) -> str:
    """A fold check's result (fold.verify_fold's report) in words."""
    if fold is None:
        return "not run by this route (`tapernorm fold` folds a run and checks it)"
    verdict = "passed" if fold.get("ok") else "failed"
    return (
        f"{verdict}: folded vs unfolded relative logit difference {fold['rel_logit_diff']:.3g} "
        f"(rtol {fold.get('rtol', 'unknown')})"
    )


def skip_export(out: Path, model_dir: Path, reason: str) -> dict:
    """OUT as a skipped export: only verify.json, recording why (an earlier export is replaced)."""
    report = {"model": str(model_dir), "skipped": reason}
    tmp = make_aside(out)
    write_json(tmp / "verify.json", report)
    install_dir(tmp, out, is_export_file, "verify.json")
    log.warning("export-hf: %s: skipped, nothing exported", reason)
    return report


def taper_hf_config(
    source: str,
    data: str | Path,
    steps: int,
    lr: float,
    batch_size: int,
    lam: float,
    device: str = "auto",
) -> RunConfig:
    """The run config that tapers every norm of HF model `source` on token shards `data`: All-Taper
    with the scale loss, g = 1 for the first quarter (calibrating c), tapering to g = 0 at three
    quarters, the last quarter at g = 0."""
    start = max(1, steps // 4)
    return resolve_run_config(
        {
            "name": f"taper-hf/{Path(source).name}",
            "variant": "all_aux",
            "data": {"dir": str(data)},
            "init": {"from": f"hf:{source}"},
            "train": {
                "steps": steps,
                "lr": lr,
                "batch_size": batch_size,
                "warmup_steps": start,
                "device": device,
            },
            "taper": {"start": start, "end": max(start + 1, 3 * steps // 4)},
            "anchor": {"lam": lam},
        }
    )


def taper_hf(
    source: str,
    data: str | Path,
    out: str | Path,
    steps: int = 200,
    lr: float = 1e-4,
    batch_size: int = 8,
    lam: float = 0.1,
    device: str = "cpu",
    force: bool = False,
    probe_windows: int = 32,
) -> dict:
    """Import a HF model with every norm tapered, fine-tune it through the taper on `data`,
    fold-verify and export: OUT/run (the run), OUT/fold_verify.json, OUT/hf (the export). OUT
    inside the model or the data, or holding files of something else (unless `force`), is
    refused (PathInUse).

    The export, loaded back from its stock files, is probed (tapernorm.probe: `probe_windows`
    validation windows, noise, outliers, the residual search) against the imported model at
    g = 1; the numbers and the verdict go into the model card and the result's `probe` (null
    when nothing was exported). A verdict past the thresholds is a warning, not an error."""

    out = Path(out)
    local = source if Path(source).exists() else None
    refuse_inside(out, {"model (--model)": local, "token shards (--data)": data})
    claim_dir(out, "taper-hf", is_taper_hf_dir, force)
    cfg = taper_hf_config(source, data, steps, lr, batch_size, lam, device)
    train(cfg, out / "run", force=force)
    model = load_model(out / "run", device).eval()
    x, y = TokenShards(data).val_windows(4, model.config.block_size)
    fold = verify_fold(model, fold_model(model), x.to(device), y.to(device), rtol=FOLD_RTOL)
    write_json(out / "fold_verify.json", fold)
    probed: dict = {}
    export = export_run(
        out / "run",
        out / "hf",
        data,
        device=device,
        route="tapernorm taper-hf",
        fold=fold,
        force=force,
        card_from=lambda path: probe_export(path, source, data, device, probe_windows, probed),
    )
    return {"fold": fold, "export": export, "probe": probed or None}


PROBE_REFERENCE = "the imported model at g = 1"


def probe_export(
    path: Path, source: str, data: str | Path, device: str, windows: int, into: dict
) -> dict:
    """The tails probe of the stock export in `path` (loaded back with load_hf) against `source`
    imported with every norm tapered, at g = 1: the result put in `into`, its card entries
    returned."""
    exported = load_hf(path).to(device)
    reference = load_hf(source, taper="all").to(device)
    settings = BatterySettings(max_windows=windows)
    result = probe_models(exported, reference, TokenShards(data), settings, reference_gate=1.0)
    into.update(against=PROBE_REFERENCE, **result)
    if not result["verdict"]["ok"]:
        log.warning(
            "taper-hf: the export is past the tails probe's thresholds against %s: %s",
            PROBE_REFERENCE,
            ", ".join(result["verdict"]["failed"]),
        )
    return card_entries(result, PROBE_REFERENCE)


def is_taper_hf_dir(out: Path) -> bool:
    """Whether `out` holds taper-hf's earlier output: its run, fold check or export."""
    from .state import is_run_dir

    run = out / "run"
    return (
        (out / "fold_verify.json").is_file()
        or (run.is_dir() and is_run_dir(run) and any(run.iterdir()))
        or is_export_dir(out / "hf")
    )
