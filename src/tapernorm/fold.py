"""Export tapered norms at g = 0: as explicit scaling ops, or folded into the next projections (Sec. 4).

At g = 0 a tapered norm is an affine map x -> x A + beta with A = c diag(gamma_tilde) (rms), or
A = c (I - 11^T/d) diag(gamma_tilde) (layer). With row vectors, the next projection x W + b becomes

    W' = A W,   b' = beta W + b

and the norm becomes the identity. In torch's Linear (weight = W^T): weight' = weight A^T, and
weight A^T = (weight * s) for rms, (weight * s) - rowmean(weight * s) for layer, where s = c gamma_tilde.
A folded final norm under tied embeddings unties the head (the embedding must stay as it was).
"""

from __future__ import annotations

import dataclasses
import logging

import torch
import torch.nn.functional as F
from torch import nn

from .model import EXPORTED, GPT
from .norms import FixedScale, TaperNorm, taper_norms

# max |logit difference| / max |reference logit| a fold must keep (Sec. 4 / 6.1: ~1e-5 in float32);
# the workflow config's fold.rtol defaults to it (a test holds the schema to it)
FOLD_RTOL = 1e-5

log = logging.getLogger(__name__)


class FoldError(RuntimeError):
    """A model cannot be folded (gate not 0, missing bias, ...)."""


class FoldVerificationError(RuntimeError):
    """Folded and unfolded models disagree beyond tolerance."""


def _g0_map(norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
    """(scale s, shift beta or None, centred?) of a tapered norm at g = 0."""
    if isinstance(norm, TaperNorm):
        shift = None if norm.bias is None else norm.bias.detach()
        return (norm.c * norm.weight_tilde).detach(), shift, norm.kind == "layer"
    if isinstance(norm, FixedScale):
        return norm.scale, norm.shift, norm.kind == "layer"
    raise FoldError(f"cannot fold a {type(norm).__name__}")


@torch.no_grad()
def _fold_into(linear: nn.Linear, scale: torch.Tensor, shift: torch.Tensor | None, center: bool):
    """Replace linear(x) by linear(x A + beta) in place (see the module docstring)."""
    w = linear.weight * scale
    if center:
        w = w - w.mean(dim=1, keepdim=True)
    if shift is not None and shift.abs().max() > 0:
        if linear.bias is None:
            raise FoldError("folding a LayerNorm shift needs a bias in the next projection")
        linear.bias += linear.weight @ shift
    linear.weight.copy_(w)


def _check_gates(model: GPT) -> None:
    for name, m in taper_norms(model):
        if m.gate_value != 0.0:
            raise FoldError(
                f"fold_model: TaperNorm {name} has gate {m.gate_value}; only g=0 folds "
                "(call tapernorm.set_gate(model, 0.0) after the taper has ended)"
            )


def _export(model: GPT, norm: str) -> tuple[GPT, list[tuple[nn.Module, list[nn.Linear]]]]:
    """A copy of `model` with its tapered norms rebuilt as `norm` (scale or folded); returns the
    (old norm, new projections after it) pairs for the caller to fill in."""
    cfg = model.config
    if cfg.norm in EXPORTED:
        raise FoldError(f"model is already exported (norm {cfg.norm!r}); fold its TaperNorm model")
    if cfg.norm == "dyt":
        raise FoldError(
            "a DyT model does not fold: tanh(alpha * x) is not linear, so no projection absorbs it"
        )
    if cfg.norm != "default":
        raise FoldError(f"only TaperNorm models fold here; this model has norm {cfg.norm!r}")
    final = cfg.taper in ("final", "all")
    new_cfg = dataclasses.replace(cfg, norm=norm) if cfg.taper != "none" else cfg  # (a plain copy)
    if norm == "folded" and final:
        new_cfg = dataclasses.replace(
            new_cfg, tie_embeddings=False, head_bias=cfg.head_bias or cfg.norm_kind == "layer"
        )
    new = GPT(new_cfg).to(device=model.tok_emb.weight.device, dtype=model.tok_emb.weight.dtype)
    old_state = model.state_dict()
    new_state = new.state_dict()
    for k in new_state:
        if k in old_state and old_state[k].shape == new_state[k].shape:
            new_state[k] = old_state[k]
    new.load_state_dict(new_state)
    pairs = []
    if cfg.taper in ("internal", "all"):
        for old_b, new_b in zip(model.blocks, new.blocks, strict=True):
            pairs.append((old_b.ln_1, [new_b.attn.qkv], new_b.ln_1))
            pairs.append((old_b.ln_2, new_b.mlp.inputs(), new_b.ln_2))
    if final:
        pairs.append((model.ln_f, [new.lm_head], new.ln_f))
    return new, pairs


def export_explicit_scaling(model: GPT) -> GPT:
    """A copy where each g = 0 tapered norm is a fixed elementwise multiply (the "unfused" export)."""
    _check_gates(model)
    new, pairs = _export(model, "scale")
    with torch.no_grad():
        for old_norm, _, new_norm in pairs:
            scale, shift, _ = _g0_map(old_norm)
            new_norm.scale.copy_(scale)
            if new_norm.shift is not None and shift is not None:
                new_norm.shift.copy_(shift)
    return new.eval()


def fold_model(model: GPT) -> GPT:
    """A new GPT whose g = 0 tapered norms are folded into the next projections; `model` is unchanged."""
    _check_gates(model)
    new, pairs = _export(model, "folded")
    for old_norm, linears, _ in pairs:
        scale, shift, center = _g0_map(old_norm)
        for linear in linears:
            _fold_into(linear, scale, shift, center)
    return new.eval()


@torch.no_grad()
def compare_logits(
    reference: nn.Module, other: nn.Module, idx: torch.Tensor, targets: torch.Tensor | None = None
) -> dict:
    """Max |logit difference| (absolute and relative to max |reference logit|) and the losses of
    two models that map tokens (B, T) to logits (B, T, vocab); targets default to idx shifted."""
    ref_mode, other_mode = reference.training, other.training
    reference.eval(), other.eval()
    za, zb = reference(idx).float(), other(idx).float()
    reference.train(ref_mode), other.train(other_mode)
    if targets is None:
        targets = idx[:, 1:]
        za_l, zb_l = za[:, :-1], zb[:, :-1]
    else:
        za_l, zb_l = za, zb
    loss_a = F.cross_entropy(za_l.reshape(-1, za.shape[-1]), targets.reshape(-1)).item()
    loss_b = F.cross_entropy(zb_l.reshape(-1, zb.shape[-1]), targets.reshape(-1)).item()
    diff = (za - zb).abs().max().item()
    scale = za.abs().max().item()
    return {
        "max_abs_logit_diff": diff,
        "logit_scale": scale,
        "rel_logit_diff": diff / max(scale, 1e-12),
        "loss_reference": loss_a,
        "loss_folded": loss_b,
        "loss_diff": loss_b - loss_a,
        "argmax_agreement": (za.argmax(-1) == zb.argmax(-1)).float().mean().item(),
        "finite": bool(torch.isfinite(zb).all()),
    }


def verify_fold(
    reference: GPT,
    folded: GPT,
    idx: torch.Tensor,
    targets: torch.Tensor | None = None,
    rtol: float = FOLD_RTOL,
) -> dict:
    """Compare logits (and loss) of the g = 0 model and its export on `idx`; raise beyond tolerance.

    Tolerance: max |logit difference| <= rtol * max |reference logit|.
    """
    report = {**compare_logits(reference, folded, idx, targets), "rtol": rtol}
    report["ok"] = bool(report["rel_logit_diff"] <= rtol) and report.pop("finite")
    if not report["ok"]:
        raise FoldVerificationError(f"folded model disagrees with the reference: {report}")
    return report
