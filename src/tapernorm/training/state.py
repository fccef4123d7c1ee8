"""The training state a run checkpoints and resumes from: weights, AdamW moments, the scale
anchor's statistics, the step, the run's identity (identity.py), the file states of its pinned
inputs and a copy of metrics.jsonl up to that step (with its sha256), as safetensors + JSON in
out/ckpt (replaced atomically, all together).

The copy of the record is what makes a resume whole when the live metrics.jsonl is gone or short
(Snakemake deletes a job's declared outputs before rerunning it; ckpt/ is not one of them).

Once a run has finished (eval.json written) without diverging, its checkpoint is pruned
(prune_checkpoint): the optimizer's moments, two thirds of it, are dropped. What stays is what a
rerun reads: state.json (identity, step, inputs), the copy of the record, and the final weights
(and scale-anchor statistics), from which a rerun whose outputs Snakemake deleted (`-f`) writes
the same weights, record and eval.json again without a step. A diverged run keeps its checkpoint
whole: it holds the weights the run was rolled back to, and a rerun trains on from it."""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

import torch
from safetensors import safe_open

from ..anchor import ScaleAnchor
from ..config.run import RunConfig
from ..model import GPT
from ..runtime import bookkeeping
from ..runtime.atomic import atomic_write_bytes
from ..runtime.links import refuse_link
from ..runtime.out_dirs import claim_dir, is_temporary, json_with, only_names, refuse_inside
from .checkpoint import (
    CheckpointError,
    load_model_tensors,
    load_tensors,
    model_tensors,
    replace_dir,
    save_tensors,
    verify_tensor_file,
    write_json,
)
from .identity import Inputs, config_identity, differences, run_identity
from .lock import LOCK_NAME
from .metrics_log import METRICS, record_lines

log = logging.getLogger(__name__)

# Every file a run writes in its directory, eval.json first (it is written last: its presence
# says the run finished). A restart removes them all, so no directory mixes two runs.
TRAINING_OUTPUTS = ("eval.json", "model.safetensors", METRICS, "config.json")
OPTIMIZER_PREFIX = "optim."  # the optimizer's tensors in state.safetensors
PRUNED_KEY = "pruned"  # in state.json: the optimizer's moments were dropped (prune_checkpoint)


def checkpoint_dirs(ckpt: Path) -> tuple[Path, Path]:
    """`ckpt` and the ckpt.old that a kill between replace_dir's two renames leaves, in the order
    a resume reads them."""
    return ckpt, ckpt.with_name(ckpt.name + ".old")


def save_training_state(
    ckpt: Path,
    *,
    model: GPT,
    opt: torch.optim.Optimizer,
    anchor: ScaleAnchor | None,
    step: int,
    identity: dict,
    metrics: bytes | None = None,
    inputs: dict | None = None,
) -> None:
    """Write the state after `step` to `ckpt` (via ckpt.tmp, so a kill never leaves half of one):
    the run's parts (`model`, `opt`, `anchor`; by keyword, as is the rest), with the run's
    identity, its inputs' file states (Inputs.record) and a copy of the record (`metrics`:
    metrics.jsonl's bytes up to `step`)."""
    tmp = ckpt.with_name(ckpt.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # what a kill mid-save left
    tensors = {f"model.{k}": v for k, v in model_tensors(model).items()}
    opt_state = opt.state_dict()
    for idx, state in opt_state["state"].items():
        for k, v in state.items():
            tensors[f"{OPTIMIZER_PREFIX}{idx}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    if anchor is not None:
        tensors.update({f"anchor.{k}": v for k, v in anchor.state_dict().items()})
    save_tensors(tmp / "state.safetensors", tensors)
    meta = {
        "step": step,
        "param_groups": opt_state["param_groups"],
        "run_config": identity["config"],
        "data": identity["data"],
        "init": identity["init"],
        "inputs": inputs or {},
    }
    if metrics is not None:
        atomic_write_bytes(tmp / METRICS, metrics)
        meta["metrics"] = {
            "sha256": hashlib.sha256(metrics).hexdigest(),
            "records": metrics.count(b"\n"),
        }
    write_json(tmp / "state.json", meta)
    replace_dir(tmp, ckpt)


def prune_checkpoint(ckpt: Path) -> bool:
    """Drop the optimizer's moments from the checkpoint of a finished, not diverged run (see the
    module's docstring), replacing it atomically; the rest is verified and kept as it is. Returns
    whether it was pruned now (False: no checkpoint, or pruned before)."""
    path = readable_checkpoint(ckpt)
    if path is None:
        return False
    meta = read_state(ckpt)
    if meta.get(PRUNED_KEY):
        return False
    state = path / "state.safetensors"
    verify_tensor_file(state)  # (a damaged checkpoint is not copied under a fresh digest)
    with safe_open(str(state), "pt") as f:
        kept = {k: f.get_tensor(k) for k in f.keys() if not k.startswith(OPTIMIZER_PREFIX)}
    tmp = ckpt.with_name(ckpt.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_tensors(tmp / "state.safetensors", kept)
    if (path / METRICS).is_file():
        atomic_write_bytes(tmp / METRICS, (path / METRICS).read_bytes())
    write_json(tmp / "state.json", {**meta, PRUNED_KEY: True})
    replace_dir(tmp, ckpt)
    return True


def readable_checkpoint(ckpt: Path) -> Path | None:
    """The directory a resume reads: `ckpt`, or the ckpt.old a kill between replace_dir's two
    renames leaves; None if neither exists."""
    current, old = checkpoint_dirs(ckpt)
    if current.is_dir():
        return current
    return old if old.is_dir() else None


def read_state(ckpt: Path) -> dict:
    """state.json of the checkpoint `ckpt` (or ckpt.old). One that cannot be read is an error that
    leaves the checkpoint alone: nothing can say whether it is this run's."""
    path = readable_checkpoint(ckpt) or ckpt
    try:
        return bookkeeping.read(bookkeeping.CHECKPOINT_STATE, path / "state.json")
    except bookkeeping.BookkeepingError as e:
        raise CheckpointError(
            f"{e}; so the checkpoint in {path} cannot be matched to the run and is left as it is: "
            f"restore the file, or delete {path} to start the run over"
        ) from None


def recorded_inputs(ckpt: Path) -> dict:
    """The input file states the checkpoint `ckpt` recorded (Inputs' `known`); {} if none."""
    if readable_checkpoint(ckpt) is None:
        return {}
    try:
        inputs = read_state(ckpt).get("inputs")
    except CheckpointError:
        return {}  # (resume says what is wrong with it)
    return inputs if isinstance(inputs, dict) else {}


def load_training_state(
    ckpt: Path, model: GPT, opt: torch.optim.Optimizer, anchor: ScaleAnchor | None
) -> int:
    """Load the state in `ckpt` (or ckpt.old) into model, optimizer and anchor; returns its step.
    A pruned checkpoint (a finished run's) leaves the optimizer without moments: no step follows."""
    meta = read_state(ckpt)
    ckpt = readable_checkpoint(ckpt) or ckpt
    try:
        tensors = load_tensors(ckpt / "state.safetensors")
        weights = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
        load_model_tensors(model, weights, str(ckpt / "state.safetensors"))
    except CheckpointError as e:
        raise CheckpointError(f"{e}; delete {ckpt} to start the run over") from None
    try:
        opt.load_state_dict(
            {"state": optimizer_state(tensors), "param_groups": meta["param_groups"]}
        )
        if anchor is not None:
            anchor.load_state_dict(
                {k[7:]: v for k, v in tensors.items() if k.startswith("anchor.")}
            )
        return int(meta["step"])
    except (KeyError, ValueError, TypeError, RuntimeError) as e:
        raise CheckpointError(
            f"checkpoint {ckpt} does not match the run ({type(e).__name__}: {e}); delete it to "
            "start the run over"
        ) from e


def optimizer_state(tensors: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    """The optimizer's per-parameter state in a checkpoint's tensors: {index: {name: tensor}}."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith(OPTIMIZER_PREFIX):
            _, idx, name = k.split(".", 2)
            state.setdefault(int(idx), {})[name] = v
    return state


def has_checkpoint(ckpt: Path) -> bool:
    """Whether `ckpt` or the ckpt.old a kill mid-replacement leaves holds a checkpoint."""
    return any(path.is_dir() for path in checkpoint_dirs(ckpt))


def checkpoint_mismatch(ckpt: Path, identity: dict) -> list[str] | None:
    """None if there is no checkpoint; else what differs between the identity it recorded and
    `identity` (empty: it may be resumed). CheckpointError if its state.json is unreadable."""
    if readable_checkpoint(ckpt) is None:
        return None
    recorded = read_state(ckpt)
    return differences({**recorded, "config": recorded.get("run_config")}, identity)


def finished_result(out: Path, ckpt: Path, identity: dict) -> dict | None:
    """eval.json's dict if `out` holds this run, finished: its checkpoint is this run's, eval.json
    (written last) records the checkpoint's step as its weights', and the other outputs are there
    and whole (the weights' digest verified). Else None: the run is resumed, its outputs written
    again. CheckpointError if the checkpoint's state.json is unreadable."""
    if checkpoint_mismatch(ckpt, identity) != []:
        return None
    try:
        result = bookkeeping.read(bookkeeping.RUN_RESULT, out / "eval.json")
        if result.get("weights_step") != read_state(ckpt).get("step"):
            return None
        if result.get("steps") != identity["config"]["train"]["steps"]:
            return None
        bookkeeping.read(bookkeeping.RUN_RECORD, out / "config.json")
        record_lines(out / METRICS)
        verify_tensor_file(out / "model.safetensors")
    except (CheckpointError, ValueError, OSError):
        return None
    return result


class RunDirError(RuntimeError):
    """A run directory holding, under one of the names a run writes, something of another kind."""


CHECKPOINT_FILES = ("state.json", "state.safetensors", METRICS)  # what a checkpoint holds


def check_run_dir(out: Path) -> None:
    """Check every name a run keeps in `out` before anything there is removed or replaced: its
    files (TRAINING_OUTPUTS, train.lock, a checkpoint's files) absent or files, its checkpoint
    directories (ckpt, ckpt.old, ckpt.tmp) absent or directories, none a symbolic link.
    RunDirError (LinkRefused for a link) naming the first that is not; nothing is touched."""
    out = Path(out)
    if not out.is_dir():
        return
    ckpt = out / "ckpt"
    dirs = {
        path: "the run's checkpoint"
        for path in (*checkpoint_dirs(ckpt), ckpt.with_name("ckpt.tmp"))
    }
    files = {out / name: f"the run's {name}" for name in TRAINING_OUTPUTS}
    files[out / LOCK_NAME] = "the run's lock file"
    for d in dirs:
        if d.is_dir() and not d.is_symlink():
            files.update({d / n: "a file of the run's checkpoint" for n in CHECKPOINT_FILES})
    for path, what in {**dirs, **files}.items():
        refuse_link(path, what)
    for names, found, expected, test in (
        (dirs, "a file", "a directory", Path.is_dir),
        (files, "a directory", "a file", Path.is_file),
    ):
        for path, what in names.items():
            if path.exists() and not test(path):
                raise RunDirError(
                    f"{path}, {what}, is {found}, not {expected}: tapernorm train removes nothing "
                    "that is not a run's own; move it away, or remove it if it is not yours, and "
                    "run the command again"
                )


def finished_differences(out: Path, ckpt: Path, identity: dict) -> list[str]:
    """What differs between `identity` and the finished run in `out` (its eval.json is there): the
    identity its checkpoint recorded, or (no checkpoint) the config its config.json records,
    compared without the model's own config; empty when `out` holds no finished run, this run,
    or a record that cannot be read (resume says what is wrong with it)."""
    if not (out / "eval.json").is_file():
        return []
    if readable_checkpoint(ckpt) is not None:
        try:
            return checkpoint_mismatch(ckpt, identity) or []
        except CheckpointError:
            return []
    try:
        record = bookkeeping.read(bookkeeping.RUN_RECORD, out / "config.json")
    except bookkeeping.BookkeepingError:
        return []
    current = identity["config"]
    recorded = {k: record.get(k) for k in current if k != "model"}
    if isinstance(recorded.get("meta"), dict):
        recorded["meta"] = {k: v for k, v in recorded["meta"].items() if k != "provenance"}
    ours = {k: v for k, v in current.items() if k != "model"}
    if config_identity(recorded) == config_identity(ours):
        return []
    return differences({**identity, "config": recorded}, {**identity, "config": ours})


def clear_run(out: Path, ckpt: Path) -> list[str]:
    """Remove every file a run writes in `out` (TRAINING_OUTPUTS, the checkpoints, the
    temporaries of interrupted atomic writes); returns the names removed."""
    removed = []
    for name in TRAINING_OUTPUTS:
        for path in [out / name, *out.glob(f".{name}.*.tmp")]:
            if path.is_file():
                path.unlink()
                removed.append(path.name)
    for path in [*checkpoint_dirs(ckpt), ckpt.with_name(ckpt.name + ".tmp")]:
        if path.exists():
            shutil.rmtree(path)
            removed.append(path.name + "/")
    return removed


RUN_RECORD_KEYS = ("name", "model", "train", "meta", "n_params")  # config.json of a run


def is_run_dir(out: Path) -> bool:
    """Whether directory `out` holds a run of this project: its checkpoint (or one a kill left
    half-written), its config.json record, or only a lock file and temporaries a kill left."""
    ckpt = out / "ckpt"
    if (ckpt / "state.json").is_file() or any(
        p.is_dir() for p in (ckpt.with_name("ckpt.old"), ckpt.with_name("ckpt.tmp"))
    ):
        return True
    if json_with(out / "config.json", RUN_RECORD_KEYS):
        return True
    return only_names(out, lambda name: name == LOCK_NAME or is_temporary(name))


def claim_run_dir(cfg: RunConfig, out: Path, force: bool = False) -> None:
    """Refuse (PathInUse) a run directory that holds files of something else (unless `force`:
    then only the files a run writes are replaced), or that is the run's data or init; and one
    where a name the run writes holds something of another kind or a link (check_run_dir)."""
    init = cfg.init.source
    inputs = {"data directory (data.dir)": cfg.data.dir}
    if init and not str(init).startswith("hf:"):
        inputs["init.from model"] = init
    refuse_inside(out, inputs)
    claim_dir(out, "train", is_run_dir, force)
    check_run_dir(out)


def resume_step(cfg: RunConfig, out_dir: str | Path) -> int:
    """The step a rerun of run `cfg` in `out_dir` resumes from: its checkpoint's, or 0 if none."""
    ckpt = Path(out_dir) / "ckpt"
    if readable_checkpoint(ckpt) is None:
        return 0
    try:
        identity = run_identity(cfg, Inputs(cfg, recorded_inputs(ckpt)))
        if checkpoint_mismatch(ckpt, identity):
            return 0
        return int(read_state(ckpt)["step"])
    except (CheckpointError, KeyError, ValueError, TypeError):
        return 0
