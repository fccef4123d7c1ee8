"""`tapernorm probe`: the tails battery of a model against a reference, with a verdict."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .args import POSITIVE, POSITIVE_FLOAT, allow_dirty_arg, device_arg

if TYPE_CHECKING:
    import torch

    from ..model import GPT

EPILOG = (
    "Thresholds (exit 1 past either, in float32 or bfloat16): the largest window loss on the "
    "5%-noisy validation windows above --max-loss-ratio (2) x the reference's, or the residual "
    "search ratio (the largest final-norm input RMS found over the clean median) above "
    "--max-search-ratio (10) x the reference's. Exit 0 within both; 2 for a usage error."
)


def load_probe_model(path: Path, device: str | torch.device) -> tuple[GPT, str]:
    """(GPT, what it is) of a model directory tapernorm writes: a run directory or fold's
    folded/ or scaled/ (config.json with a "model" entry), or a Hugging Face save_pretrained
    directory (export-hf, taper-hf's hf/: config.json with a model_type)."""
    from ..runtime.jsonio import read_json
    from ..training.checkpoint import load_model

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory {path} does not exist")
    if not (path / "config.json").is_file():
        inside = [p.name for p in (path / "folded", path / "scaled", path / "hf") if p.is_dir()]
        hint = f" (it holds {', '.join(inside)}/: give one of them)" if inside else ""
        raise ValueError(
            f"{path} holds no config.json: give a run directory, fold's folded/ or scaled/, or a "
            f"save_pretrained directory{hint}"
        )
    config = read_json(path / "config.json")
    if isinstance(config, dict) and "model" in config:
        model = load_model(path, device)
        norm = model.config.norm
        return model, f"{path} ({'run' if norm == 'default' else norm} model)"
    if isinstance(config, dict) and "model_type" in config:
        from ..interop.hf_import import load_hf

        return load_hf(path).to(device), f"{path} (Hugging Face {config['model_type']})"
    raise ValueError(
        f"{path / 'config.json'} has neither a 'model' entry (tapernorm) nor a 'model_type' "
        "(Hugging Face): not a model directory"
    )


def _reference(args: argparse.Namespace, model, device):
    """(reference, its gate, its label): --reference at g = 0, else the model itself at g = 1."""
    from ..norms import taper_norms

    if args.reference is not None:
        reference, label = load_probe_model(args.reference, device)
        return reference, 0.0, f"reference {label}"
    if not any(True for _ in taper_norms(model)):
        raise ValueError(
            f"{args.model} has no TaperNorm layers (norm {model.config.norm!r}, taper "
            f"{model.config.taper!r}), so it has no g = 1 to compare with: give --reference DIR "
            "(e.g. the baseline run, or the run it was folded or exported from)"
        )
    return model, 1.0, "the same model at g = 1"


def _claim_out(args: argparse.Namespace) -> None:
    from ..runtime.out_dirs import claim_file, json_with, refuse_inside

    inputs = {"model": args.model, "reference (--reference)": args.reference}
    refuse_inside(args.out, {**inputs, "token shards (--data)": args.data})
    own = lambda path: json_with(path, ("probe", "verdict", "model", "reference"))  # noqa: E731
    claim_file(args.out, "probe", own, args.force)


def _settings(args: argparse.Namespace):
    from ..probe import BatterySettings, SearchSettings, Thresholds

    search = SearchSettings(budget=args.search_budget, length=args.search_length)
    battery = BatterySettings(
        max_windows=args.windows, batch_size=args.batch_size, seed=args.seed, search=search
    )
    return battery, Thresholds(args.max_loss_ratio, args.max_search_ratio)


def _cmd_probe(args: argparse.Namespace) -> int:
    import torch

    from ..data import TokenShards
    from ..probe import format_report, probe_models
    from ..runtime.device import resolve_device
    from ..runtime.jsonio import write_json

    if args.out:
        _claim_out(args)
    settings, thresholds = _settings(args)
    device = resolve_device(args.device, setting="--device")
    threads = args.threads or (1 if device.type == "cpu" else None)  # (as `tapernorm train`)
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        model, label = load_probe_model(args.model, device)
        reference, gate, against = _reference(args, model, device)
        shards = TokenShards(args.data)
        result = probe_models(model, reference, shards, settings, thresholds, 0.0, gate)
    finally:
        torch.set_num_threads(previous)
    result = {"probe": "tails battery", "model_dir": str(args.model), "against": against, **result}
    print(format_report(result, label, against))
    if args.out:
        write_json(args.out, result)
    if not result["verdict"]["ok"]:
        failed = ", ".join(result["verdict"]["failed"])
        print(f"tapernorm probe: past its thresholds: {failed}", file=sys.stderr)
        return 1
    return 0


def battery_args(p: argparse.ArgumentParser) -> None:
    """The battery's settings (probe.battery.BatterySettings): `probe`'s and `tails`'."""
    p.add_argument("--windows", type=POSITIVE, default=256, help="validation windows at most")
    p.add_argument("--batch-size", type=POSITIVE, default=16, help="windows per forward pass")
    p.add_argument("--search-budget", type=POSITIVE, default=2048, help="search: forward passes")
    p.add_argument("--search-length", type=POSITIVE, default=32, help="search: window tokens")
    p.add_argument("--seed", type=int, default=0, help="noise, ids drawn and the search")


def probe_parser(sub) -> None:
    p = sub.add_parser(
        "probe",
        help="the tails battery of a model (noisy, rare, repeated windows; residual search) "
        "against a reference; exit 1 past its thresholds",
        epilog=EPILOG,
    )
    p.add_argument("model", type=Path, metavar="MODEL_DIR", help="run, folded/, scaled/ or HF dir")
    p.add_argument(
        "--reference",
        type=Path,
        metavar="DIR",
        help="the model to compare with (run at g = 0); default: MODEL_DIR at g = 1, if it has "
        "TaperNorm layers",
    )
    p.add_argument("--data", type=Path, required=True, help="token shards (validation windows)")
    p.add_argument("--out", type=Path, help="write every number as JSON here")
    battery_args(p)
    p.add_argument(
        "--max-loss-ratio",
        type=POSITIVE_FLOAT,
        default=2.0,
        help="largest 5%%-noisy window loss allowed, as a multiple of the reference's",
    )
    p.add_argument(
        "--max-search-ratio",
        type=POSITIVE_FLOAT,
        default=10.0,
        help="residual search ratio allowed, as a multiple of the reference's",
    )
    p.add_argument(
        "--threads",
        type=POSITIVE,
        help="torch CPU threads (default: 1 on the CPU, where the numbers are then bit-"
        "reproducible and many small forward passes run fastest on a busy machine)",
    )
    device_arg(p)
    p.add_argument(
        "--force", action="store_true", help="replace an --out that is not an earlier result"
    )
    allow_dirty_arg(p, only_with_out=True)
    p.set_defaults(func=_cmd_probe)
