"""The models the inference benchmarks time: the paper's config, random-weight baseline, tapered
and DyT models, paper Table 3's columns {baseline, explicit, folded} (and "dyt"), those copied onto
the benchmark's device and dtype after every export was verified, and the model columns of a row.

`inference_variants` turns a baseline and a g = 0 tapered model into {baseline, explicit, folded}
(and a DyT model, if given, into a fourth column "dyt": the norm-free alternative, timed as it is
since it cannot fold); bench.forward and bench.decode time them.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import torch

from ..fold import export_explicit_scaling, fold_model, verify_fold
from ..model import DYT_RECIPE, EXPORTED, GPT, GPTConfig
from ..norms import set_gate, taper_norms
from ..variants import VARIANTS
from .timing import environment, matmul_precision


def paper_config(**overrides) -> GPTConfig:
    """The paper's 30M model: d=512, L=8, 16 heads, vocab 10k, SwiGLU, RoPE (Sec. 6.1)."""
    base = dict(style="llama", n_layer=8, n_head=16, n_embd=512, vocab_size=10000, block_size=512)
    return GPTConfig(**{**base, **overrides})


@torch.no_grad()
def random_variants(cfg: GPTConfig, seed: int = 0) -> tuple[GPT, GPT]:
    """A random-weight baseline and an Internal-Taper model with the same weights at g = 0.

    The tapered model gets random gamma_tilde in [0.8, 1.25] and, layer by layer in one forward pass
    on random tokens, c = 1 / rms of its norm's input (what calibration yields in a trained model;
    without it a random network at g = 0 overflows within a few layers).
    """
    torch.manual_seed(seed)
    baseline = GPT(dataclasses.replace(cfg, taper="none", norm="default")).eval()
    tapered = GPT(dataclasses.replace(cfg, taper="internal", norm="default")).eval()
    tapered.load_state_dict(baseline.state_dict(), strict=False)  # TaperNorm state keeps its init
    for _, norm in taper_norms(tapered):
        norm.weight_tilde.uniform_(0.8, 1.25)
        norm.frozen.fill_(True)
    set_gate(tapered, 0.0)

    def calibrate(norm: torch.nn.Module, args: tuple[torch.Tensor]) -> None:
        norm.c.fill_(float(args[0].float().pow(2).mean().rsqrt()))

    hooks = [norm.register_forward_pre_hook(calibrate) for _, norm in taper_norms(tapered)]
    tapered(torch.randint(0, cfg.vocab_size, (4, min(cfg.block_size, 64))))
    for hook in hooks:
        hook.remove()
    return baseline, tapered


@torch.no_grad()
def random_dyt(cfg: GPTConfig, seed: int = 0) -> GPT:
    """A random-weight model of `cfg`'s sizes with every norm a DyT, by DyT's LLaMA recipe
    (model.DYT_RECIPE: untied head, embedding scalar, no DyT bias, alpha0 by width)."""
    torch.manual_seed(seed)
    dyt = dataclasses.replace(
        cfg,
        taper="none",
        dyt_alpha_attn=None,
        dyt_alpha_other=None,
        **DYT_RECIPE,
    )
    return GPT(dyt).eval()


TAPERED_COLUMNS = VARIANTS["internal_aux"]["bench"]["columns"]  # what the tapered model is timed as


def inference_variants(
    baseline: GPT, tapered: GPT | None, dyt: GPT | None = None
) -> tuple[dict[str, GPT], GPT | None]:
    """The three columns of paper Table 3 and the model the exports are verified against:
    {"baseline", "explicit": `tapered` at g = 0 with its norms as fixed multiplies, "folded"}, and
    "dyt" when a DyT model is given. Without a tapered model (a benchmark that skips it): the
    baseline (and DyT) alone, and no reference."""
    if tapered is not None and (tapered.config.taper == "none" or tapered.config.norm != "default"):
        raise ValueError("inference_variants needs a TaperNorm model (taper set, norm 'default')")
    if dyt is not None and dyt.config.norm != "dyt":
        raise ValueError(f"inference_variants: the dyt model has norm {dyt.config.norm!r}")
    models, reference = {"baseline": baseline.eval()}, None
    if tapered is not None:
        reference = tapered.eval()
        set_gate(reference, 0.0)
        models["explicit"] = export_explicit_scaling(reference)
        models["folded"] = fold_model(reference)
    if dyt is not None:
        models["dyt"] = dyt.eval()
    return models, reference


def with_block_size(model: GPT, block_size: int) -> GPT:
    """`model` able to take `block_size` positions (the same weights; RoPE tables recomputed), or
    `model` itself when it already can. Learned positions (gpt2 style) cannot grow."""
    cfg = model.config
    if block_size <= cfg.block_size:
        return model
    if cfg.style != "llama":
        raise ValueError(
            f"{cfg.style} models have learned positions: block_size {cfg.block_size} cannot grow "
            f"to the {block_size} positions asked for"
        )
    p = model.tok_emb.weight
    longer = GPT(dataclasses.replace(cfg, block_size=block_size)).to(p.device, p.dtype)
    longer.load_state_dict(model.state_dict())
    return longer.train(model.training)


def prepare_models(
    models: dict[str, GPT],
    reference: GPT | None,
    device: torch.device,
    dtype: torch.dtype,
    rtol: float = 1e-4,  # random tokens: trained d64 Internal-Taper (+aux) measured 2.9e-5 here
    check: Callable[[GPT], object] | None = None,
) -> dict[str, GPT]:
    """Copies of `models` on `device` in `dtype`, in eval mode, after every export among them
    (norm scale or folded) was verified against the g = 0 `reference` in float32 at full matmul
    precision: verify_fold raises FoldVerificationError beyond `rtol` (looser than the fold rule's
    1e-5 on validation text: random tokens drive a trained model's unnormalized blocks harder and
    float32 roundoff grows; a wrong fold is off by far more). `check`, if given, is called
    on each model there too (float32, on `device`). The inputs are left as they are."""
    exports = [n for n, m in models.items() if m.config.norm in EXPORTED]
    if exports and reference is None:
        raise ValueError(f"exported models {exports} need a reference to be verified against")
    out = {}
    with torch.inference_mode(), matmul_precision("highest"):
        if exports:
            reference = copy.deepcopy(reference).to(device=device, dtype=torch.float32).eval()
            cfg = reference.config
            gen = torch.Generator().manual_seed(1)
            idx = torch.randint(0, cfg.vocab_size, (2, min(cfg.block_size, 64)), generator=gen)
        for name, model in models.items():
            out[name] = copy.deepcopy(model).to(device=device, dtype=torch.float32).eval()
            if name in exports:
                verify_fold(reference, out[name], idx.to(device), rtol=rtol)
            if check is not None:
                check(out[name])
            out[name].to(dtype=dtype)
    return out


def describe(model: GPT) -> dict:
    """The model columns of a benchmark row."""
    cfg = model.config
    return {
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "vocab_size": cfg.vocab_size,
        "params": model.num_params(),
    }


def common_row(
    benchmark: str, mode: str, device: torch.device, dtype: torch.dtype, model: GPT
) -> dict:
    """Columns shared by every row of a benchmark: what was measured, where, with what."""
    env = environment(device)
    return {
        "benchmark": benchmark,
        "mode": mode,
        "device": device.type,
        "device_name": env["device"],
        "torch": env["torch"],
        "dtype": str(dtype).removeprefix("torch."),
        "threads": env["threads"],
        **describe(model),
    }
