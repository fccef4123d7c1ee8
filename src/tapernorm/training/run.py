"""A training run set up and resumed: what train() builds before its first step.

set_up pins the inputs (identity.Inputs), loads the data, builds the model (fresh, or from
`init.from`) with the same init in every process, the scale anchor, the optimizer, the FakeLN
schedule and the fixed validation windows into a Run; resume makes the run directory consistent
with its checkpoint (or starts it over) and returns the step to continue from. Batches are drawn
by batch_generator, a pure function of (seed, step, micro-batch), so a resumed run draws exactly
the batches an uninterrupted one would.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
from torch.nn.parallel import DistributedDataParallel

from ..anchor import ScaleAnchor
from ..config.run import FakeLNSection, RunConfig, TrainSection
from ..data import TokenShards
from ..fakeln import FakeLNSchedule
from ..model import GPT, GPTConfig, convert_norms
from ..norms import Reduce, taper_norms
from ..runtime.device import autocast_for
from ..runtime.provenance import distributions, git_state, host, now, versions
from .checkpoint import load_model
from .distributed import (
    ModelHidden,
    World,
    barrier,
    data_parallel,
    make_reduce,
    rank_micro_batches,
)
from .evaluation import validation_windows
from .identity import Inputs, data_sha256, run_identity
from .metrics_log import MetricsLog, restore_metrics
from .run_dir import RunDir
from .state import read_state
from .tensorboard_log import TensorBoardLog
from .trunk import branch

log = logging.getLogger(
    "tapernorm.training.loop"
)  # the training loop's one logger (selftest quiets it)

EVAL_KEYS = ("log.eval_windows", "log.eval_batch_size")  # what an evaluation's OutOfMemory names


def batch_generator(seed: int, step: int, micro: int) -> torch.Generator:
    """The RNG that draws micro-batch `micro` of step `step`: a pure function of (seed, step, micro)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + micro)


def build_model(cfg: RunConfig, vocab_size: int) -> GPT:
    """A fresh GPT, or the one `init.from` names, with the config's taper."""
    source = cfg.init.source
    if source is None:
        return GPT(GPTConfig(**cfg.model.gpt_fields(vocab_size)))
    taper, norm = cfg.model.taper, cfg.model.norm_name
    if source.startswith("hf:"):
        from ..interop.hf_import import load_hf

        model = load_hf(source[3:], taper=taper)
        if norm != "default":
            model = convert_norms(model, taper, norm)
    else:
        model = convert_norms(load_model(source), taper, norm)
    if model.config.vocab_size < vocab_size:
        raise ValueError(
            f"init.from model {source} has a vocabulary of {model.config.vocab_size}, smaller "
            f"than that of the data {cfg.data.dir} ({vocab_size}): give token shards made "
            "with the model's tokenizer (prepare-data --tokenizer gpt2 for GPT-2 models)"
        )
    return model


def fakeln_schedule(window: FakeLNSection | None, model: GPT) -> FakeLNSchedule | None:
    """The FakeLN schedule of a run config's `fakeln` section, or None for other models."""
    if model.config.norm != "fakeln":
        return None
    if window is None:
        raise ValueError("a FakeLN model trains with a run config's fakeln section")
    return FakeLNSchedule(model, window.start, window.end, window.ema_mu)


def make_optimizer(model: GPT, train: TrainSection) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on gains, biases or norm parameters)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": train.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # fused on CUDA (one kernel for all parameters, no host reads); foreach elsewhere
    fused = {"fused": True} if next(model.parameters()).device.type == "cuda" else {"foreach": True}
    return torch.optim.AdamW(groups, lr=train.lr, betas=train.betas, **fused)


# ---- set-up and resume ----------------------------------------------------------------------------


@dataclass(kw_only=True)
class Run:
    """One training run, set up: its config, data, model, optimizer and where it writes."""

    cfg: RunConfig
    dir: RunDir  # where it writes: out/{config.json, metrics.jsonl, ckpt/, ...}
    world: World
    device: torch.device
    shards: TokenShards
    model: GPT
    opt: torch.optim.AdamW
    anchor: ScaleAnchor | None
    fakeln: FakeLNSchedule | None  # None unless model.norm is fakeln
    micro_batches: list[int]  # this process's share of each step's grad_accum micro-batches
    reduce: Reduce | None  # sums statistics over the processes (None for one process)
    identity: dict  # config + data and init fingerprints (identity.py): what a resume must match
    forward: Callable  # the training forward: the model (in DDP for several processes), compiled
    provenance: dict  # what made the run: code, host, versions, threads, start (config.json meta)
    inputs: Inputs  # the data and init files, pinned: checked at each checkpoint and at the end
    val_windows: tuple[torch.Tensor, torch.Tensor]  # the fixed validation windows (made up front)
    metrics: MetricsLog | None = None  # metrics.jsonl, open from resume on (rank 0)
    tensorboard: TensorBoardLog | None = None  # with log.tensorboard: its view, open with metrics
    ddp: DistributedDataParallel | None = None  # the model in DDP (several processes), else None
    ddp_hidden: ModelHidden | None = None  # with DDP: the model's own h of its last forward

    @property
    def tapered(self) -> bool:
        return self.model.config.taper != "none"

    @property
    def taper_started(self) -> bool:
        """Whether every TaperNorm's c is frozen (the taper began, in this run or before a resume)."""
        return all(norm.is_frozen for _, norm in taper_norms(self.model))

    @property
    def autocast(self) -> AbstractContextManager:
        return autocast_for(self.device, self.cfg.train.dtype)

    def grad_sync(self, last: bool) -> AbstractContextManager:
        """Around a micro-batch's forward and backward: DDP sums the gradients over the processes
        in the backward of this process's `last` micro-batch of the step, and accumulates them
        locally before it (no_sync); nothing to do for one process."""
        if self.ddp is None or last:
            return contextlib.nullcontext()
        return self.ddp.no_sync()

    def own_hidden(self, h: torch.Tensor) -> torch.Tensor:
        """h_L of the last training forward as the model returned it, for a gradient with respect
        to it: `h` itself for one process; DDP's copy of it is not on the loss's path."""
        return h if self.ddp_hidden is None else self.ddp_hidden.h


def set_up(cfg: RunConfig, run_dir: RunDir, world: World, device: torch.device) -> Run:
    """The run of `cfg` into `run_dir`: inputs pinned (hashed before they are read), data, model
    (the same init in every process), scale anchor, optimizer, FakeLN schedule, validation
    windows."""
    inputs = Inputs(cfg, run_dir.recorded_inputs())
    torch.manual_seed(cfg.seed)
    shards = TokenShards(cfg.data.dir, cfg.data.train_tokens)
    model = build_model(cfg, shards.vocab_size).to(device)
    mcfg = model.config
    if shards.vocab_size > mcfg.vocab_size:
        raise ValueError(
            f"the data {cfg.data.dir} has a vocabulary of {shards.vocab_size}, the model "
            f"only {mcfg.vocab_size} (model.vocab_size): set model.vocab_size to at least "
            f"{shards.vocab_size}, or leave it out to take the data's"
        )
    shards.check_fits(mcfg.block_size)
    micro_batches = rank_micro_batches(cfg.train.grad_accum, world.rank, world.size)
    reduce = make_reduce(world, device)
    anchor = None
    if cfg.anchor.enabled:
        anchor = ScaleAnchor(mcfg.norm_kind, cfg.anchor.lam, mcfg.norm_eps, cfg.anchor.form)
        anchor = anchor.to(device)
    opt = make_optimizer(model, cfg.train)
    fakeln = fakeln_schedule(cfg.fakeln, model)
    identity = run_identity(cfg, inputs)
    val_windows = validation_windows(shards, cfg.log.eval_windows, mcfg.block_size, EVAL_KEYS[0])
    ddp = data_parallel(model, world, device)  # None for one process: the bare model trains
    # train.compile: one graph per gate phase (g = 1, 0 < g < 1, g = 0): TaperNorm branches on the
    # phase and computes with the gate buffer, so a changing g does not recompile (with DDP,
    # dynamo splits the graphs at its gradient buckets)
    forward = ddp if ddp is not None else model
    forward = torch.compile(forward) if cfg.train.compile else forward
    provenance = {
        **git_state(),
        "host": host(),
        "versions": versions(),
        "distributions": distributions(),  # every installed one (env_lock compares them)
        "threads": torch.get_num_threads(),
        "device": str(device),
        "processes": world.size,
        "started": now(),
        "data_sha256": data_sha256(inputs),  # the bytes trained on (comparable.py compares them)
    }
    return Run(
        cfg=cfg,
        dir=run_dir,
        world=world,
        device=device,
        shards=shards,
        model=model,
        opt=opt,
        anchor=anchor,
        fakeln=fakeln,
        micro_batches=micro_batches,
        reduce=reduce,
        identity=identity,
        forward=forward,
        provenance=provenance,
        inputs=inputs,
        val_windows=val_windows,
        ddp=ddp,
        ddp_hidden=ModelHidden(model) if ddp is not None else None,
    )


def config_record(run: Run, **extra) -> dict:
    """config.json: the resolved run config, the model's config, and in `meta.provenance` what made
    the run (not part of its identity: a resume compares the run config, not this file)."""
    cfg = run.cfg.to_dict()
    meta = {**cfg["meta"], "provenance": {**run.provenance, **extra.pop("times", {})}}
    return {**cfg, "meta": meta, "n_params": run.model.num_params(), **extra}


def resume(run: Run) -> int:
    """The step the run continues from: its checkpoint's (loaded, metrics.jsonl restored to it) or
    0. A checkpoint of another config, data or init is not resumed: the run starts over, and every
    file of the old run is removed first; one whose state.json is unreadable is an error. Rank 0
    writes config.json and opens the record (run.metrics; with log.tensorboard, run.tensorboard)."""
    cfg, run_dir, world = run.cfg, run.dir, run.world
    if world.main:
        run_dir.out.mkdir(parents=True, exist_ok=True)
        mismatch = run_dir.mismatch(run.identity)
        if mismatch:
            log.warning(
                "[%s] checkpoint in %s is from %s: starting over",
                cfg.name,
                run_dir.out,
                "; ".join(mismatch),
            )
        if mismatch is None or mismatch:
            removed = run_dir.clear()
            if removed and mismatch is None:
                log.info(
                    "[%s] no checkpoint in %s: removed %s of an earlier run, starting over",
                    cfg.name,
                    run_dir.out,
                    ", ".join(removed),
                )
        else:  # rewritten at the end; until then the directory does not look finished
            run_dir.unfinish()
        run_dir.write_config(config_record(run, model=run.model.config.to_dict()))
    barrier(world)  # every rank sees the checkpoint rank 0 kept
    step, ckpt, how = 0, run_dir.readable_checkpoint(), "resumed from"
    if run_dir.has_checkpoint():
        step = run_dir.load(run.model, run.opt, run.anchor)
    elif cfg.init.trunk is not None:  # the steps before the taper, as the trunk trained them
        step, ckpt = branch(cfg, run.model, run.opt, run.anchor)
        how = f"branched from its trunk {cfg.init.trunk} at"
    if world.main:
        metrics_path = run_dir.metrics_path
        if step:
            saved = read_state(ckpt).get("metrics")
            restored = restore_metrics(metrics_path, ckpt, step, saved, cfg.name)
            note = f" ({metrics_path.name} restored: {restored} records)" if restored else ""
            log.info("[%s] %s step %d%s", cfg.name, how, step, note)
        run.metrics = MetricsLog(metrics_path, cfg.name)
        if cfg.log.tensorboard:
            run.tensorboard = TensorBoardLog(run_dir.out, step)
    return step
