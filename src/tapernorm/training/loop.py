"""One training loop for pre-training and fine-tuning, with the taper schedule and the scale anchor.

Per optimizer step k (1-based): set lr(k) and g(k); when g first drops below 1, freeze every TaperNorm's
c (gamma_tilde := gamma) and the anchor's s_tgt; run the micro-batches; while g = 1 fold the batch
statistics into the calibration EMAs; clip; step. Data order depends only on (seed, k), so a resumed run
draws exactly the batches an uninterrupted run would.

Data parallel: launched by `torchrun --nproc_per_node W` (WORLD_SIZE > 1), rank r computes micro-batches
r, r + W, ... of every step; the model trains in DistributedDataParallel, which sums the gradients over
ranks in buckets during the backward of each rank's last micro-batch (distributed.data_parallel), and
losses and calibration statistics are summed over ranks, so the W processes take the very steps one
process would (same global batch), and only rank 0 writes files. One process trains the bare model.

train() = set_up (inputs pinned, data, model, optimizer) -> resume (from out/ckpt; both in
training/run.py) -> train_steps (the loop) -> finish (final weights, rolled back if the run
diverged; final evaluation; eval.json; the checkpoint pruned to what a rerun reads unless the run
diverged). A run found finished (RunDir.finished) is left as it is. The data and init files are
checked at every checkpoint and at the end (identity.Inputs): a file changed mid-run stops it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..config.run import RunConfig
from ..model import GPT
from ..norms import freeze, set_gate, update_calibration
from ..runtime.device import resolve_device
from ..runtime.progress import clock
from ..runtime.provenance import now
from ..schedules import gate_at, lr_at
from .blowups import SpikeDetector, events_of, summary
from .cadence import Cadence
from .checkpoint import write_json
from .diagnostics import clipped, grad_norms, output_stats, prelogit_geometry
from .distributed import World, barrier, process_group
from .evaluation import evaluate
from .identity import run_identity
from .memory import check_fits
from .run import (
    EVAL_KEYS,
    Run,
    batch_generator,
    build_model,
    config_record,
    resume,
    set_up,
)
from .run_dir import RunDir
from .state import RunDirError
from .tensorboard_log import check_available
from .trunk import RECORD as TRUNK_RECORD
from .trunk import trunk_config

log = logging.getLogger(__name__)


# ---- the loop -------------------------------------------------------------------------------------


class Progress:
    """A tqdm bar on a terminal; elsewhere a log line per logged step with tok/s, elapsed and ETA
    (training's own: it reports the loss; other long steps use tapernorm.runtime.progress.Progress)."""

    def __init__(self, name: str, first_step: int, steps: int, main: bool):
        self.name, self.first_step, self.steps, self.main = name, first_step, steps, main
        self.on_tty = sys.stderr.isatty() and main
        self.bar = tqdm(
            total=steps, initial=first_step, desc=name, disable=not self.on_tty, file=sys.stderr
        )
        self.start = self.last_report = time.perf_counter()
        self.tokens = 0  # since the last report

    def step_done(self, tokens: int) -> None:
        self.tokens += tokens
        self.bar.update(1)

    def tokens_per_s(self) -> float:
        """Tokens a second since the last call (or the start); starts the next interval."""
        now = time.perf_counter()
        rate = self.tokens / max(now - self.last_report, 1e-9)
        self.last_report, self.tokens = now, 0
        return rate

    def report(self, step: int, loss: float, gate: float, lr: float, tokens_per_s: float) -> None:
        if self.on_tty:
            self.bar.set_postfix(loss=f"{loss:.4f}", g=f"{gate:.3f}")
        elif self.main:
            elapsed = self.last_report - self.start
            eta = elapsed / (step - self.first_step) * (self.steps - step)
            log.info(
                "[%s] step %d/%d loss %.4f g %.3f lr %.2e | %.0f tok/s, elapsed %s, ETA %s",
                self.name,
                step,
                self.steps,
                loss,
                gate,
                lr,
                tokens_per_s,
                clock(elapsed),
                clock(eta),
            )

    def close(self) -> None:
        self.bar.close()


@dataclass
class Outcome:
    """How the loop ended."""

    step: int  # the last step taken
    checkpoint_step: int  # the step of the last checkpoint written (or resumed from)
    first_step: int = 0  # the step this process started from (0, or the checkpoint it resumed)
    diverged_step: int | None = None  # the step whose loss or gradient norm was not finite
    stopped: bool = False  # ended early by stop_after


@dataclass
class Step:
    """One optimizer step's results, on the device: nothing is read back until a boundary."""

    record: dict  # step, lr, gate and what changed at this step (values may be device tensors)
    losses: torch.Tensor  # (CE, scale loss), float64, the mean over the step's micro-batches
    grad_norm: torch.Tensor  # the total gradient norm before clipping
    norms: dict  # gradient norms per weight type (only on logged steps)


STEP_KEYS = frozenset({"step", "lr", "gate"})  # what start_step records at every step


def recorded_event(record: dict) -> bool:
    """Whether start_step's `record` holds an event: anything but STEP_KEYS (the anchor's s_tgt
    or every c frozen, FakeLN's norms removed)."""
    return not record.keys() <= STEP_KEYS


def start_step(run: Run, step: int) -> dict:
    """lr(k) and g(k) of optimizer step `step`; at the first g < 1 the anchor's target and every c
    freeze, and FakeLN removes the norms due. Returns the step's record: step, lr, gate, and what
    froze or was removed (device tensors; such a step is always logged)."""
    train, taper = run.cfg.train, run.cfg.taper
    lr = lr_at(step, train.lr, train.warmup_steps, train.steps, train.min_lr)
    for group in run.opt.param_groups:
        group["lr"] = lr
    gate = gate_at(step, taper.start, taper.end) if run.tapered else 1.0
    record: dict = {"step": step, "lr": lr, "gate": gate}
    if gate < 1.0 and run.anchor is not None and not run.anchor.is_frozen:
        record["s_tgt"] = run.anchor.freeze()
    if gate < 1.0 and run.tapered and not run.taper_started:
        record["c"] = freeze(run.model)
    set_gate(run.model, gate)
    if run.fakeln is not None:
        record.update(run.fakeln.before_step(step))
    return record


def train_step(run: Run, record: dict, logged: bool) -> Step:
    """The optimizer step `start_step` began (its `record`): this process's micro-batches forward
    and backward (DDP sums the gradients over processes in the last backward), statistics summed
    over processes, calibration while g = 1, clip, AdamW. Reads nothing back from the device unless
    `logged` (the logged step's output and gradient statistics)."""
    cfg, model, opt, anchor, fakeln = run.cfg, run.model, run.opt, run.anchor, run.fakeln
    step, gate, accum = record["step"], record["gate"], cfg.train.grad_accum
    B, T = cfg.train.batch_size, model.config.block_size
    losses = torch.zeros(2, dtype=torch.float64, device=run.device)  # summed CE, scale loss
    for micro in run.micro_batches:
        x, y = run.shards.batch("train", B, T, batch_generator(cfg.data_order_seed, step, micro))
        x, y = to_device(x, run.device), to_device(y, run.device)
        with run.grad_sync(last=micro == run.micro_batches[-1]):  # DDP: sums in the last backward
            with run.autocast:
                logits, h = run.forward(x, return_hidden=True)
            ce = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            aux = anchor.loss(h) if anchor is not None else ce.new_zeros(())
            if logged and micro == 0:
                record.update(output_stats(model, logits, h, y))
                if cfg.log.geometry:
                    head_of = model if run.forward is not model else None  # compiled, DDP
                    record.update(prelogit_geometry(logits, run.own_hidden(h), y, ce, head_of))
            ((ce + aux) / accum).backward()
        losses += torch.stack([ce.detach(), aux.detach()]).double()
    losses = (run.reduce(losses) if run.reduce else losses).div(accum)

    if gate == 1.0 and run.tapered:
        update_calibration(model, cfg.taper.ema_mu, run.reduce)
    if anchor is not None:
        anchor.update(cfg.taper.ema_mu, run.reduce)
    if fakeln is not None:
        fakeln.after_step(run.reduce)
    norms = grad_norms(model) if logged else {}
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return Step(record, losses, grad_norm, norms)


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU batch on `device`: through pinned memory, without waiting, on CUDA."""
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)


class StepChecks:
    """Every step's cross-entropy, scale loss and gradient norm, kept on the device between
    boundaries (no step reads anything back) and checked, step by step, at each one
    (blowups.SpikeDetector): a blow-up is a metrics.jsonl record naming the batch; a non-finite
    one ends the run (`diverged`)."""

    def __init__(self, run: Run, records: list[dict]):
        self.run = run
        self.detector = SpikeDetector.from_records(run.cfg.train.clip, records)
        self.pending: list[tuple[int, float, torch.Tensor]] = []  # (step, gate, (ce, aux, grad))
        self.diverged: tuple[int, str] | None = None  # (step, "loss" | "gradient")

    def add(self, result: Step) -> None:
        values = torch.cat([result.losses, result.grad_norm.double().reshape(1)])
        self.pending.append((result.record["step"], result.record["gate"], values))

    def check(self, logged: bool) -> None:
        """Check the steps since the last boundary (this one last; `logged`: its loss joins the
        reference); stops at the first non-finite one."""
        pending, self.pending = self.pending, []
        values = torch.stack([v for _, _, v in pending]).tolist()
        for (step, gate, _), (ce, aux, grad) in zip(pending, values, strict=True):
            event = self.detector.check(gate, ce, grad, aux)
            if event is not None:
                self.record(step, event)
                if event["kind"].startswith("nonfinite"):
                    self.diverged = (
                        step,
                        "loss" if event["kind"] == "nonfinite_loss" else "gradient",
                    )
                    return
        if logged:
            self.detector.logged(values[-1][0])

    def record(self, step: int, event: dict) -> None:
        """The event as a metrics.jsonl record, with the batch that made it (data seed and window
        starts of each micro-batch: what `tapernorm replay` draws again)."""
        cfg, run = self.run.cfg, self.run
        if run.metrics is None:
            return
        B, T = cfg.train.batch_size, run.model.config.block_size
        seed = cfg.data_order_seed
        starts = [
            run.shards.batch_starts("train", B, T, batch_generator(seed, step, micro))
            for micro in range(cfg.train.grad_accum)
        ]
        event["batch"] = {"data_seed": seed, "starts": starts}
        write_record(run, {"step": step, "blowup": event})
        log.warning(
            "[%s] blow-up at step %d (g %.3f): %s, loss %s, grad norm %s",
            cfg.name, step, event["gate"], event["kind"], event["loss"], event["grad_norm"],
        )  # fmt: skip


def host_values(record: dict) -> dict:
    """A record with its device tensors read back as Python numbers (one read per boundary)."""
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            value = host_values(value)
        elif torch.is_tensor(value):
            value = value.item()
        out[key] = value
    return out


def write_record(run: Run, record: dict) -> None:
    """A record to metrics.jsonl and, with log.tensorboard, to the TensorBoard log (rank 0)."""
    run.metrics.write(record)
    if run.tensorboard is not None:
        run.tensorboard.write(record)


def train_steps(run: Run, first_step: int, stop_after: int | None) -> Outcome:
    """Optimizer steps first_step + 1 ... train.steps, logged, evaluated and checkpointed as the
    config's `log` says (cadence.py). Stops at a non-finite loss or gradient norm (noticed at the
    next boundary: a logged, evaluated or checkpointed step, which is where anything is read from
    the device; the weights are rolled back in `finish`), or after step `stop_after`."""
    cfg = run.cfg
    steps, cadence = cfg.train.steps, Cadence.of(cfg, stop_after)
    tokens = cfg.train.batch_size * run.model.config.block_size * cfg.train.grad_accum
    progress = Progress(cfg.name, first_step, steps, run.world.main)
    outcome = Outcome(step=first_step, checkpoint_step=first_step, first_step=first_step)
    checks = StepChecks(run, run.metrics.records() if run.metrics else [])
    run.model.train()
    for step in range(first_step + 1, steps + 1):
        record = start_step(run, step)
        acts = cadence.at(step, events=recorded_event(record))
        result = train_step(run, record, acts.logged)
        checks.add(result)
        progress.step_done(tokens)
        if not acts.boundary:
            continue

        # a boundary: read what the steps since the last one left on the device
        checks.check(acts.logged)
        bad = checks.diverged
        if bad is not None:
            outcome.diverged_step, outcome.step = bad[0], bad[0] - 1
            log.warning("[%s] non-finite %s at step %d: stopping", cfg.name, bad[1], bad[0])
            break
        outcome.step = step
        if acts.logged:
            log_step(run, result, progress)
        if acts.evaluated and run.metrics is not None:  # the model as trained: its gate
            val = validation_loss(run, run.model, gate=None)
            write_record(run, {"step": step, "val_loss": val, "val_gate": result.record["gate"]})
        if acts.checkpointed and run.metrics is not None:
            write_checkpoint(run, step)
            outcome.checkpoint_step = step
        if acts.stopped:
            outcome.stopped = True
            break
    progress.close()
    return outcome


def log_step(run: Run, result: Step, progress: Progress) -> None:
    """A logged step's record, read back from the device, to metrics.jsonl (rank 0) and the
    progress bar or line."""
    loss, aux_loss = result.losses.tolist()
    grad_norm = result.grad_norm.item()
    record = host_values(result.record)
    record.update(result.norms, **clipped(result.norms, grad_norm, run.cfg.train.clip))
    tokens_per_s = progress.tokens_per_s()
    record.update(loss=loss, aux_loss=aux_loss, grad_norm=grad_norm, tokens_per_s=tokens_per_s)
    if run.metrics is not None:
        write_record(run, record)
    progress.report(record["step"], loss, record["gate"], record["lr"], tokens_per_s)


def write_checkpoint(run: Run, step: int) -> None:
    """The training state after `step` to the run's ckpt, with a copy of the record up to it
    (rank 0)."""
    run.inputs.check()  # the steps since the last checkpoint read the pinned data
    run.metrics.keep(whole=True)
    run.dir.save(
        model=run.model,
        opt=run.opt,
        anchor=run.anchor,
        step=step,
        identity=run.identity,
        metrics=run.metrics.content(),
        inputs=run.inputs.record(),
    )


# ---- the end: weights, final evaluation, eval.json ------------------------------------------------


def validation_loss(run: Run, model: GPT, gate: float | None = 0.0) -> float:
    """The validation loss of `model` on the run's fixed windows, at g = `gate` (None: the gate
    the model holds, as during training: a periodic evaluation shows the model as trained)."""
    n, batch = run.cfg.log.eval_windows, run.cfg.log.eval_batch_size
    return evaluate(model, run.shards, n, batch, run.val_windows, EVAL_KEYS, gate=gate)


def finish(run: Run, outcome: Outcome) -> dict:
    """Rank 0 saves the weights (rolled back to the last checkpoint if the run diverged), evaluates
    them at g = 0 and writes eval.json last; returns its dict. Other ranks wait for it. The inputs
    are checked before anything is written and again before eval.json, and the record is put back
    if it went missing."""
    cfg, model, world = run.cfg, run.model, run.world
    if not world.main:
        barrier(world)  # wait for rank 0's final evaluation
        return {"rank": world.rank, "step": outcome.step}
    run.inputs.check()
    weights_step = outcome.step
    if outcome.diverged_step is not None:  # roll back to the last good checkpoint, or the init
        weights_step = outcome.checkpoint_step
        if run.dir.has_checkpoint():
            weights_step = run.dir.load(model, run.opt, run.anchor)
        else:
            torch.manual_seed(cfg.seed)  # the very init set_up built
            model.load_state_dict(build_model(cfg, run.shards.vocab_size).state_dict())
    finished = {"finished": now(), "resumed_from_step": outcome.first_step}
    record = {"weights_step": weights_step}
    if outcome.diverged_step is not None:
        record["diverged_step"] = outcome.diverged_step
    run.dir.write_weights(model, config_record(run, **record, times=finished))
    val = validation_loss(run, model)
    result = {
        "name": cfg.name,
        "variant": cfg.variant,
        "val_loss": val if math.isfinite(val) else None,
        "eval": "g=0" if run.tapered else "no taper",
        "steps": cfg.train.steps,
        "weights_step": weights_step,
        "diverged": outcome.diverged_step is not None,
        "diverged_step": outcome.diverged_step,
        **summary(events_of(run.metrics.records())),  # every step checked (blowups.py)
        "blowups_checked": "every step",
        "n_params": model.num_params(),
        "eval_windows": cfg.log.eval_windows,
        "block_size": model.config.block_size,
        "processes": world.size,
    }
    run.inputs.check()  # (the final evaluation read val.bin)
    run.metrics.keep(whole=True)
    run.dir.write_eval(result)
    if outcome.diverged_step is not None:
        log.warning("[%s] %s", cfg.name, diverged_line(outcome.diverged_step, weights_step, val))
    barrier(world)
    if not result["diverged"]:
        run.dir.prune(cfg.name)
    return result


def diverged_line(step: int, weights_step: int, val: float) -> str:
    """The one line a diverged run's log ends with: what happened, what it kept, where it says so."""
    kept = "its init" if weights_step == 0 else f"its checkpoint of step {weights_step}"
    return (
        f"DIVERGED at step {step}: weights rolled back to step {weights_step} ({kept}), validation "
        f"loss {val:.4f} at g=0; eval.json says diverged: true, and fold, export and the benchmarks "
        "skip this run"
    )


def train(
    cfg: RunConfig,
    out_dir: str | Path,
    stop_after: int | None = None,
    wait: bool = False,
    force: bool = False,
) -> dict:
    """Run (or resume) one training run described by a resolved run config; returns eval.json's dict.

    Writes out_dir/{config.json, metrics.jsonl, ckpt/, model.safetensors, eval.json} (and, with
    log.tensorboard, out_dir/tensorboard/), eval.json last, holding out_dir/train.lock meanwhile
    (a second train() on out_dir is refused, or with `wait` waits for the first to end). A run
    found finished is left as it is (its eval.json returned). `stop_after` ends the process early
    (as if killed) after that many steps: used by resume tests.
    A directory holding anything but a run of this project is refused (RunDir.claim), unless
    `force`: then only the files a run writes are replaced.
    Under torchrun (WORLD_SIZE > 1) it joins the process group (NCCL on GPUs, gloo on CPUs);
    ranks other than 0 return {"rank": r, "step": k} and write nothing.
    """
    if not isinstance(cfg, RunConfig):
        raise TypeError(
            f"train() takes a RunConfig, not {type(cfg).__name__}: "
            "tapernorm.config.resolve_run_config(dict) or load_run_config(path) builds one"
        )
    check_available(cfg)  # log.tensorboard without its package: stop before anything starts
    run_dir = RunDir(Path(out_dir))
    run_dir.claim(cfg, force)
    world = World.from_env()
    device = resolve_device(cfg.train.device, world.local_rank, "train.device")
    check_fits(cfg, device)  # a run that cannot fit: one line, before anything is built
    with process_group(world, device):
        run = set_up(cfg, run_dir, world, device)
        lock = run_dir.lock(cfg.name, wait) if world.main else contextlib.nullcontext()
        with lock:  # one writer per run directory
            done = run_dir.finished(run.identity)
            if done is not None:
                if world.main:
                    log.info(
                        "[%s] %s holds this run, finished: nothing to do", cfg.name, run_dir.out
                    )
                    if not done.get("diverged"):  # (one that ended before pruning it)
                        run_dir.prune(cfg.name)
                    return done
                return {"rank": world.rank, "step": done["weights_step"]}
            replacing(run, force)  # (in every process: each stops before the barrier of resume)
            try:
                outcome = train_steps(run, resume(run), stop_after)
                if outcome.stopped:
                    return {"stopped_at": outcome.step}
                return finish(run, outcome)
            finally:
                if run.metrics is not None:
                    run.metrics.close()
                if run.tensorboard is not None:
                    run.tensorboard.close()


def replacing(run: Run, force: bool) -> None:
    """Refuse (RunDirError) to start over in a directory holding a finished run of another config,
    data or init, naming what differs, unless `force`: then it is replaced, said in the log and
    recorded in the new config.json (meta.provenance.replaced)."""
    differ = run.dir.finished_differences(run.identity)
    if not differ:
        return
    what = "; ".join(differ)
    if not force:
        raise RunDirError(
            f"{run.dir.out} holds a finished run of {what}: give a new --out, or add --force to "
            "replace it (its weights, record and eval.json are removed)"
        )
    if not run.world.main:
        return
    log.warning(
        "[%s] --force: replacing the finished run in %s (%s)", run.cfg.name, run.dir.out, what
    )
    run.provenance["replaced"] = f"a finished run of {what} (--force)"


def train_trunk(
    cfg: RunConfig, out_dir: str | Path, wait: bool = False, force: bool = False
) -> dict:
    """Train the trunk of run `cfg` (trunk.trunk_config: the steps before its taper, which every
    variant of the run shares) into out_dir: config.json, metrics.jsonl and its one checkpoint,
    ckpt/, at step taper.start, then trunk.json (what this returns: out_dir, the trunk's name and
    step); no eval.json. A trunk already there, whole, is kept as it is."""
    family = cfg.name.rsplit("/", 1)[0] if "/" in cfg.name else ""
    seeds = f"s{cfg.seed}" + ("" if cfg.data_seed is None else f"-o{cfg.data_seed}")
    name = f"{family}/trunk-{seeds}" if family else f"trunk-{seeds}"
    trunk = trunk_config(cfg, name)
    if trunk is None:
        raise ValueError(
            f"run {cfg.name} has no trunk: its steps before the taper are its own (a trunk needs "
            "an eager llama-style run with RMS norms, a random init, a registry variant and a "
            "taper start before its last step)"
        )
    run_dir, step = RunDir(Path(out_dir)), trunk.taper.start
    run_dir.check()  # (before anything in it is removed)
    (run_dir.out / TRUNK_RECORD).unlink(missing_ok=True)
    run_dir.remove_empty_checkpoints()
    if run_dir.mismatch(run_identity(trunk)) == [] and run_dir.state().get("step") == step:
        log.info("[%s] %s holds this trunk, at step %d: nothing to do", name, run_dir.out, step)
    else:
        step = train(trunk, run_dir.out, stop_after=step, wait=wait, force=force)["stopped_at"]
    result = {"trunk": str(run_dir.out), "name": name, "step": step}
    write_json(run_dir.out / TRUNK_RECORD, result)
    return result
