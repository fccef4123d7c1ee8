"""One training loop for pre-training and fine-tuning, with the taper schedule and the scale anchor.

Per optimizer step k (1-based): set lr(k) and g(k); when g first drops below 1, freeze every TaperNorm's
c (gamma_tilde := gamma) and the anchor's s_tgt; run the micro-batches; while g = 1 fold the batch
statistics into the calibration EMAs; clip; step. Data order depends only on (seed, k), so a resumed run
draws exactly the batches an uninterrupted run would.

Data parallel: launched by `torchrun --nproc_per_node W` (WORLD_SIZE > 1), rank r computes micro-batches
r, r + W, ... of every step, gradients, losses and calibration statistics are summed over ranks, so the
W processes take the very steps one process would (same global batch), and only rank 0 writes files.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from .anchor import ScaleAnchor, token_scale
from .checkpoint import (
    CheckpointError,
    load_model,
    load_model_tensors,
    load_tensors,
    model_tensors,
    read_json,
    replace_dir,
    save_model,
    save_tensors,
    write_json,
)
from .data import TokenShards
from .device import autocast_for, resolve_device
from .evaluation import evaluate
from .fakeln import schedule_for
from .model import GPT, GPTConfig, convert_norms
from .norms import Reduce, TaperNorm, set_gate, start_taper, taper_norms, update_calibration
from .schedules import gate_at, lr_at

GRAD_GROUPS = {  # metric name -> the weights of each block that form it (W_1 = both SwiGLU inputs)
    "grad_attn_qkv": ("attn.qkv.weight",),
    "grad_attn_out": ("attn.proj.weight",),
    "grad_mlp_in": ("mlp.w_in.weight", "mlp.w_gate.weight"),
    "grad_mlp_out": ("mlp.w_out.weight",),
}


def batch_generator(seed: int, step: int, micro: int) -> torch.Generator:
    """The RNG that draws micro-batch `micro` of step `step`: a pure function of (seed, step, micro)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + micro)


def build_model(cfg: dict, vocab_size: int) -> GPT:
    """A fresh GPT, or the one `init.from` names, with the config's taper."""
    m = cfg["model"]
    source = cfg["init"]["from"]
    if source is None:
        fields = {k: v for k, v in m.items() if k != "vocab_size"}
        return GPT(GPTConfig(vocab_size=m["vocab_size"] or vocab_size, **fields))
    if source.startswith("hf:"):
        from .hf import load_hf

        model = load_hf(source[3:], taper=m["taper"])
        if m.get("norm", "default") != "default":
            model = convert_norms(model, m["taper"], m["norm"])
    else:
        model = convert_norms(load_model(source), m["taper"], m.get("norm", "default"))
    if model.config.vocab_size < vocab_size:
        raise ValueError(
            f"init.from model has vocab {model.config.vocab_size} < data's {vocab_size}"
        )
    return model


def make_optimizer(model: GPT, t: dict) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": t["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=t["lr"], betas=tuple(t["betas"]), foreach=True)


def grad_norms(model: GPT) -> dict[str, float]:
    """Frobenius norm of each weight type's gradient, averaged over blocks (before clipping).

    After clipping each is times the common factor min(1, clip / total norm), logged as `*_clipped`.
    """
    out = {}
    for name, suffixes in GRAD_GROUPS.items():
        norms = []
        for block in model.blocks:
            grads = [p.grad for n, p in block.named_parameters() if n in suffixes]
            grads = [g for g in grads if g is not None]
            if grads:
                norms.append(torch.sqrt(sum(g.pow(2).sum() for g in grads)).item())
        out[name] = sum(norms) / len(norms) if norms else 0.0
    return out


def clipped(norms: dict[str, float], total_norm: float, clip: float) -> dict[str, float]:
    """The gradient norms after clip_grad_norm_ scaled every gradient by min(1, clip / total)."""
    factor = min(1.0, clip / (total_norm + 1e-6))  # torch's clip coefficient
    return {f"{name}_clipped": value * factor for name, value in norms.items()}


def output_stats(model: GPT, logits: torch.Tensor, h: torch.Tensor, y: torch.Tensor) -> dict:
    """What the pre-logit scale does to the output: the logit norm, r(h) (what the scale loss
    holds), the softmax saturation mean ||softmax(z) - onehot(y)||_2 (the CE gradient w.r.t. z), and
    once the final norm tapers, c_f * r(h): how much larger than the normalizing branch (for which it
    is 1) the fixed scale makes the output."""
    mcfg = model.config
    z, h = logits.detach().float(), h.detach().float()
    scale = token_scale(h, mcfg.norm_kind, mcfg.norm_eps)
    residual = torch.softmax(z, dim=-1)
    residual.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(residual[..., :1], -1.0))
    out = {
        "logit_norm": z.norm(dim=-1).mean().item(),
        "prelogit_scale": scale.mean().item(),
        "saturation": residual.norm(dim=-1).mean().item(),
    }
    final = model.ln_f
    if isinstance(final, TaperNorm) and bool(final.frozen):
        out["final_c_r"] = float(final.c) * out["prelogit_scale"]
    return out


def prelogit_geometry(logits: torch.Tensor, h: torch.Tensor, y: torch.Tensor, ce) -> dict:
    """Fraction of tokens with a positive margin z_y - max_{j!=y} z_j, and mean cos(dCE/dh, h)."""
    (grad_h,) = torch.autograd.grad(ce, h, retain_graph=True)
    z = logits.detach().float()
    z_y = z.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    z_other = z.scatter(-1, y.unsqueeze(-1), float("-inf")).amax(-1)
    cos = F.cosine_similarity(grad_h.float(), h.detach().float(), dim=-1)
    return {
        "margin_pos_frac": (z_y > z_other).float().mean().item(),
        "grad_h_cos": cos.mean().item(),
    }


# ---- checkpoint and resume ------------------------------------------------------------------------


def save_training_state(
    ckpt: Path, model: GPT, opt, anchor: ScaleAnchor | None, step: int, cfg: dict
) -> None:
    tmp = ckpt.with_name(ckpt.name + ".tmp")
    tensors = {f"model.{k}": v for k, v in model_tensors(model).items()}
    opt_state = opt.state_dict()
    for idx, state in opt_state["state"].items():
        for k, v in state.items():
            tensors[f"optim.{idx}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    if anchor is not None:
        tensors.update({f"anchor.{k}": v for k, v in anchor.state_dict().items()})
    save_tensors(tmp / "state.safetensors", tensors)
    meta = {"step": step, "param_groups": opt_state["param_groups"], "run_config": cfg}
    write_json(tmp / "state.json", meta)
    replace_dir(tmp, ckpt)


def load_training_state(ckpt: Path, model: GPT, opt, anchor: ScaleAnchor | None) -> int:
    if not ckpt.is_dir() and ckpt.with_name(ckpt.name + ".old").is_dir():
        ckpt = ckpt.with_name(ckpt.name + ".old")  # killed between the two renames of replace_dir
    meta = read_json(ckpt / "state.json")
    tensors = load_tensors(ckpt / "state.safetensors")
    load_model_tensors(
        model, {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, str(ckpt)
    )
    state: dict = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            _, idx, name = k.split(".", 2)
            state.setdefault(int(idx), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    if anchor is not None:
        anchor.load_state_dict({k[7:]: v for k, v in tensors.items() if k.startswith("anchor.")})
    return int(meta["step"])


def stale_checkpoint(ckpt: Path, cfg: dict) -> bool:
    """True if a checkpoint exists but was written under a different run config."""
    for path in (ckpt, ckpt.with_name(ckpt.name + ".old")):
        if (path / "state.json").is_file():
            try:
                return read_json(path / "state.json").get("run_config") != cfg
            except CheckpointError:
                return True
    return False


def resume_step(cfg: dict, out_dir: str | Path) -> int:
    """The step a rerun of run `cfg` in `out_dir` resumes from: its checkpoint's, or 0 if none."""
    ckpt = Path(out_dir) / "ckpt"
    if stale_checkpoint(ckpt, cfg):
        return 0
    for path in (ckpt, ckpt.with_name(ckpt.name + ".old")):  # load_training_state's order
        if path.is_dir():
            try:
                return int(read_json(path / "state.json")["step"])
            except (CheckpointError, KeyError, ValueError):
                return 0
    return 0


def clock(seconds: float) -> str:
    """A duration as m:ss, or h:mm:ss from an hour on."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metrics logged after `step` (they belong to the part of a killed run being redone)."""
    if path.exists():
        keep = [ln for ln in path.read_text().splitlines() if ln and json.loads(ln)["step"] <= step]
        path.write_text("".join(ln + "\n" for ln in keep))


# ---- data parallelism (torchrun) -------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """This process among torchrun's data-parallel processes (rank 0 of 1 without torchrun)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> World:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1:
            return cls()
        return cls(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))


def rank_micro_batches(accum: int, rank: int, world_size: int) -> list[int]:
    """The micro-batches of each step that `rank` computes: rank, rank + W, ..., so that the W
    ranks together compute exactly the `accum` micro-batches a single process would."""
    if accum < world_size:
        raise ValueError(
            f"train.grad_accum={accum} is smaller than the {world_size} processes: every process "
            "needs at least one micro-batch per step (raise grad_accum, lower batch_size)"
        )
    return list(range(rank, accum, world_size))


def make_reduce(world: World, device: torch.device) -> Reduce | None:
    """A sum over all processes of a small CPU tensor (None for a single process)."""
    if world.size == 1:
        return None

    def reduce(t: torch.Tensor) -> torch.Tensor:
        t = t.to(device)  # NCCL reduces GPU tensors only
        dist.all_reduce(t)
        return t.cpu()

    return reduce


def sum_grads(model: GPT, world: World) -> None:
    """Sum every gradient over the processes: each holds its micro-batches' share of the mean."""
    if world.size > 1:
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)


# ---- the loop -------------------------------------------------------------------------------------


def train(cfg: dict, out_dir: str | Path, stop_after: int | None = None) -> dict:
    """Run (or resume) one training run described by a resolved run config; returns eval.json's dict.

    Writes out_dir/{config.json, metrics.jsonl, ckpt/, model.safetensors, eval.json}; eval.json last.
    `stop_after` ends the process early (as if killed) after that many steps: used by resume tests.
    Under torchrun (WORLD_SIZE > 1) it joins the process group (NCCL on GPUs, gloo on CPUs);
    ranks other than 0 return {"rank": r, "step": k} and write nothing.
    """
    world = World.from_env()
    device = resolve_device(cfg["train"]["device"], world.local_rank, "train.device")
    if world.size == 1 or dist.is_initialized():
        return _train(cfg, Path(out_dir), stop_after, world, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        return _train(cfg, Path(out_dir), stop_after, world, device)
    finally:
        dist.destroy_process_group()


def _train(
    cfg: dict, out: Path, stop_after: int | None, world: World, device: torch.device
) -> dict:
    t, tp, log = cfg["train"], cfg["taper"], cfg["log"]
    seed = cfg["seed"]
    torch.manual_seed(seed)  # the same init in every process
    shards = TokenShards(cfg["data"]["dir"], cfg["data"]["train_tokens"])
    model = build_model(cfg, shards.vocab_size).to(device)
    mcfg = model.config
    if shards.vocab_size > mcfg.vocab_size:
        raise ValueError(f"data vocab {shards.vocab_size} exceeds model vocab {mcfg.vocab_size}")
    my_micros = rank_micro_batches(t["grad_accum"], world.rank, world.size)
    reduce = make_reduce(world, device)
    tapered = mcfg.taper != "none"
    anchor = None
    if cfg["anchor"]["enabled"]:
        a = cfg["anchor"]
        anchor = ScaleAnchor(mcfg.norm_kind, a["lam"], mcfg.norm_eps, a["form"]).to(device)
    opt = make_optimizer(model, t)
    fakeln = schedule_for(cfg, model)  # None unless model.norm is fakeln

    ckpt, metrics_path = out / "ckpt", out / "metrics.jsonl"
    if world.main:
        out.mkdir(parents=True, exist_ok=True)
        write_json(
            out / "config.json", {**cfg, "model": mcfg.to_dict(), "n_params": model.num_params()}
        )
        if stale_checkpoint(ckpt, cfg):
            print(
                f"[{cfg['name']}] checkpoint in {out} is from another config: starting over",
                file=sys.stderr,
            )
            for path in (ckpt, ckpt.with_name("ckpt.old")):
                shutil.rmtree(path, ignore_errors=True)
    if world.size > 1:
        dist.barrier()  # every rank sees the checkpoint rank 0 kept
    step = 0
    if ckpt.is_dir() or ckpt.with_name("ckpt.old").is_dir():
        step = load_training_state(ckpt, model, opt, anchor)
        if world.main:
            truncate_metrics(metrics_path, step)
            print(f"[{cfg['name']}] resumed from step {step}", file=sys.stderr)
    elif world.main and metrics_path.exists():
        metrics_path.unlink()

    B, T, accum = t["batch_size"], mcfg.block_size, t["grad_accum"]
    autocast = autocast_for(device, t["dtype"])
    on_tty = sys.stderr.isatty() and world.main
    bar = tqdm(
        total=t["steps"], initial=step, desc=cfg["name"], disable=not on_tty, file=sys.stderr
    )
    diverged_step, last_good_step = None, step
    t_last, tokens_since = time.perf_counter(), 0
    t_start, first_step = t_last, step  # for the elapsed time and ETA of off-TTY progress lines
    model.train()
    metrics_file = metrics_path.open("a") if world.main else open(os.devnull, "w")
    with metrics_file:
        while step < t["steps"]:
            k = step + 1
            lr = lr_at(k, t["lr"], t["warmup_steps"], t["steps"], t["min_lr"])
            for group in opt.param_groups:
                group["lr"] = lr
            g = gate_at(k, tp["start"], tp["end"]) if tapered else 1.0
            record: dict = {"step": k, "lr": lr, "gate": g}
            if g < 1.0 and anchor is not None and not anchor.active:
                record["s_tgt"] = anchor.freeze()
            if g < 1.0 and tapered and not all(bool(m.frozen) for _, m in taper_norms(model)):
                record["c"] = start_taper(model)
            set_gate(model, g)
            if fakeln is not None:
                record.update(fakeln.before_step(k))
            logging = k == 1 or k % log["every"] == 0 or k == t["steps"] or len(record) > 3

            ce_sum, aux_sum = 0.0, 0.0
            for micro in my_micros:
                x, y = shards.batch("train", B, T, batch_generator(seed, k, micro))
                x, y = x.to(device), y.to(device)
                with autocast:
                    logits, h = model(x, return_hidden=True)
                ce = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
                aux = anchor.loss(h) if anchor is not None else torch.zeros((), device=device)
                if logging and micro == 0:
                    record.update(output_stats(model, logits, h, y))
                    if log["geometry"]:
                        record.update(prelogit_geometry(logits, h, y, ce))
                ((ce + aux) / accum).backward()
                ce_sum += ce.item()
                aux_sum += aux.item()
            sums = torch.tensor([ce_sum, aux_sum], dtype=torch.float64)
            loss, aux_loss = (reduce(sums) if reduce else sums).div(accum).tolist()

            if not math.isfinite(loss + aux_loss):
                diverged_step = k
                print(f"[{cfg['name']}] non-finite loss at step {k}: stopping", file=sys.stderr)
                break
            sum_grads(model, world)
            if g == 1.0 and tapered:
                update_calibration(model, tp["ema_mu"], reduce)
            if anchor is not None:
                anchor.update(tp["ema_mu"], reduce)
            if fakeln is not None:
                fakeln.after_step(reduce)
            norms = grad_norms(model) if logging else {}
            clip = t["grad_clip"] if t["grad_clip"] > 0 else float("inf")
            total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
            record.update(norms, **clipped(norms, total_norm, clip))
            if not math.isfinite(total_norm):
                diverged_step = k
                print(f"[{cfg['name']}] non-finite gradient at step {k}: stopping", file=sys.stderr)
                break
            opt.step()
            opt.zero_grad(set_to_none=True)
            step, tokens_since = k, tokens_since + B * T * accum
            bar.update(1)

            if logging:
                now = time.perf_counter()
                record.update(
                    loss=loss,
                    aux_loss=aux_loss,
                    grad_norm=total_norm,
                    tokens_per_s=tokens_since / max(now - t_last, 1e-9),
                )
                t_last, tokens_since = now, 0
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
                if not on_tty and world.main:
                    elapsed = now - t_start
                    eta = elapsed / (k - first_step) * (t["steps"] - k)
                    print(
                        f"[{cfg['name']}] step {k}/{t['steps']} loss {loss:.4f} g {g:.3f} "
                        f"lr {lr:.2e} | {record['tokens_per_s']:.0f} tok/s, "
                        f"elapsed {clock(elapsed)}, ETA {clock(eta)}",
                        file=sys.stderr,
                    )
                else:
                    bar.set_postfix(loss=f"{loss:.4f}", g=f"{g:.3f}")
            if log["eval_every"] and k % log["eval_every"] == 0 and k < t["steps"] and world.main:
                val = evaluate(model, shards, log["eval_windows"], log["eval_batch_size"])
                metrics_file.write(json.dumps({"step": k, "val_loss": val}) + "\n")
            if (k % log["ckpt_every"] == 0 or k == t["steps"]) and world.main:
                metrics_file.flush()
                save_training_state(ckpt, model, opt, anchor, k, cfg)
                last_good_step = k
            if stop_after is not None and k >= stop_after:
                bar.close()
                return {"stopped_at": k}
    bar.close()
    if not world.main:
        dist.barrier()  # wait for rank 0's final evaluation
        return {"rank": world.rank, "step": step}

    if diverged_step is not None:  # roll back to the last good checkpoint, or keep the init
        if ckpt.is_dir():
            last_good_step = load_training_state(ckpt, model, opt, anchor)
    weights_step = step if diverged_step is None else last_good_step
    save_model(model, out, {**cfg, "n_params": model.num_params(), "weights_step": weights_step})
    val = evaluate(model, shards, log["eval_windows"], log["eval_batch_size"])
    if not math.isfinite(val):
        val = None
    result = {
        "name": cfg["name"],
        "variant": cfg.get("variant"),
        "val_loss": val,
        "eval": "g=0" if tapered else "no taper",
        "steps": t["steps"],
        "weights_step": weights_step,
        "diverged": diverged_step is not None,
        "diverged_step": diverged_step,
        "n_params": model.num_params(),
        "eval_windows": log["eval_windows"],
        "block_size": T,
        "processes": world.size,
    }
    write_json(out / "eval.json", result)
    if world.size > 1:
        dist.barrier()
    return result
