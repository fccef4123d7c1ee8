"""What the training loop logs besides the loss: gradient norms per weight type (before and after
clipping), the output's scale and saturation, and the pre-logit geometry."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..model import GPT
from ..norms import TaperNorm, token_scale

GRAD_GROUPS = {  # metric name -> the weights of each block that form it (W_1 = both SwiGLU inputs)
    "grad_attn_qkv": ("attn.qkv.weight",),
    "grad_attn_out": ("attn.proj.weight",),
    "grad_mlp_in": ("mlp.w_in.weight", "mlp.w_gate.weight"),
    "grad_mlp_out": ("mlp.w_out.weight",),
}


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
    if isinstance(final, TaperNorm) and final.is_frozen:
        out["final_c_r"] = float(final.c) * out["prelogit_scale"]
    return out


def head_without_calibration(model: GPT, h: torch.Tensor) -> torch.Tensor:
    """model.head(h) with the final norm in eval mode for the call: a second pass through the head
    records no calibration statistics (a TaperNorm's c, a FakeNorm's s), so the diagnostic leaves
    the training as it would be without it (the output is the same in either mode)."""
    ln_f, was_training = model.ln_f, model.ln_f.training
    ln_f.eval()
    try:
        return model.head(h)
    finally:
        ln_f.train(was_training)


def prelogit_geometry(
    logits: torch.Tensor,
    h: torch.Tensor,
    y: torch.Tensor,
    ce: torch.Tensor,
    head_of: GPT | None = None,
) -> dict:
    """Fraction of tokens with a positive margin z_y - max_{j!=y} z_j, and mean cos(dCE/dh, h).

    dCE/dh through the training graph; with `head_of` (a model) through its head applied again to
    a detached h (head_without_calibration): a compiled forward returns logits and h as sibling
    outputs of one graph node, so the training graph holds no path from h to the loss."""
    if head_of is None:
        (grad_h,) = torch.autograd.grad(ce, h, retain_graph=True)
    else:
        h_leaf = h.detach().requires_grad_()
        z_again = head_without_calibration(head_of, h_leaf).float().flatten(0, 1)
        (grad_h,) = torch.autograd.grad(F.cross_entropy(z_again, y.flatten()), h_leaf)
    z = logits.detach().float()
    z_y = z.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    z_other = z.scatter(-1, y.unsqueeze(-1), float("-inf")).amax(-1)
    cos = F.cosine_similarity(grad_h.float(), h.detach().float(), dim=-1)
    return {
        "margin_pos_frac": (z_y > z_other).float().mean().item(),
        "grad_h_cos": cos.mean().item(),
    }
