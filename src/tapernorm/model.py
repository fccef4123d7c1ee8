"""A pre-norm GPT in two block styles, with TaperNorm where `taper` says.

    h1 = h0 + Attn(ln_1(h0));  h2 = h1 + MLP(ln_2(h1));  logits = ln_f(h_L) @ W_out      (paper Sec. 1)

llama: RMSNorm, SwiGLU (hidden 8d/3), RoPE, no biases.  gpt2: LayerNorm, GELU, learned positions, biases.
Both tie the output head to the token embedding unless told otherwise (a folded final norm unties it).

Which module each norm is: GPTConfig.norm says what the norms are and GPTConfig.taper which of them
taper (the table in GPTConfig's docstring, applied in make_norm); every norm layer is in norms.py.
dyt_config(...) is DyT as its authors train LLaMA-style language models (DYT_RECIPE, docs/norm-free.md).

One attention path (Attention.forward) and one loop over the blocks (GPT.hidden) serve training,
evaluation and decoding: with a KV cache (one per layer, owned by the decode engine: decode.KVCache)
and a position offset they run a chunk after cached tokens, and a `linear` argument lets the eager
decode step put its projections on other kernels (decode.step_linear). GPT.generate runs
tapernorm.decode's engine, which sits below the model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import nn

from . import decode
from .decode import Linear, layer_linear
from .norms import DyT, FakeNorm, FixedScale, LayerNorm, RMSNorm, TaperNorm

STYLES = ("llama", "gpt2")
TAPERS = ("none", "internal", "final", "all")
MLPS = ("swiglu", "gelu")  # GPTConfig.mlp (None: the style's)
NORMS = ("default", "dyt", "fakeln", "scale", "folded")  # GPTConfig.norm (its docstring's table)
EVERY_NORM = ("dyt", "fakeln")  # replace every norm: nothing tapers
EXPORTED = ("scale", "folded")  # the tapered norms at g = 0 after fold.py: only it sets these
INIT_STD = 0.02  # every Linear and Embedding weight starts N(0, INIT_STD^2) (GPT-2's init)

# DyT's alpha0 for LLaMA-style LMs by width: (width, before attention, the others), Zhu et al. 2025
# Table 11 (depth does not matter there). A width between two rows takes the wider row's values
# (the smaller alpha0); below d=1024, the narrowest row.
DYT_ALPHA0 = ((1024, 1.0, 1.0), (2048, 1.0, 0.5), (4096, 0.8, 0.2), (8192, 0.2, 0.05))


def dyt_alpha0(width: int) -> tuple[float, float]:
    """(alpha0 of the DyT before attention, alpha0 of the others) for a model of this width."""
    for row_width, attn, other in DYT_ALPHA0:
        if width <= row_width:
            return attn, other
    return DYT_ALPHA0[-1][1:]


# DyT as its authors give it for LLaMA (their Sec. 7 and App. A): no bias in DyT, an untied head, and
# a learnable scalar after the embedding that starts the residual stream at unit scale (theirs:
# sqrt(d) over embeddings of std 1/sqrt(d); ours: 1 / INIT_STD); alpha0 from dyt_alpha0.
DYT_RECIPE = {"norm": "dyt", "dyt_bias": False, "tie_embeddings": False, "emb_scale": 1 / INIT_STD}


@dataclass
class GPTConfig:
    """Sizes and switches of a GPT.

    One selector says what the norms (ln_1, ln_2 of each block and ln_f) are: `norm`. `taper`
    (none | internal | final | all) says which of them taper: internal = ln_1 and ln_2 of every
    block, final = ln_f. `style` fixes the kind of a plain norm (`norm_kind`: RMSNorm for llama,
    LayerNorm for gpt2). make_norm builds each position as follows:

      norm      the norms `taper` names             the others
      default   TaperNorm (training, any gate)      the style's norm
      dyt       -                                   DyT (trained from scratch, never folds)
      fakeln    -                                   FakeNorm (removed in fine-tuning, fakeln.py)
      scale     FixedScale (g = 0 as a multiply)    the style's norm
      folded    nothing (in the next projections)   the style's norm

    dyt and fakeln replace every norm, so they need taper="none" (run configs: config._resolve_norm).
    scale and folded are what fold.py's export_explicit_scaling and fold_model write (an export's
    config.json carries them); a run config cannot set them (schemas/run.schema.yaml). DyT's alpha0
    is `dyt_alpha_attn` before attention, `dyt_alpha_other` before the MLP and the head; None takes
    them from DyT's width table dyt_alpha0 (1.0 and 1.0 up to d=1024).
    """

    style: str = "llama"
    n_layer: int = 8
    n_head: int = 16
    n_embd: int = 512
    vocab_size: int = 10000
    block_size: int = 512
    taper: str = "none"  # which norms taper: none | internal | final | all
    n_kv_head: int | None = None  # grouped-query attention (llama imports); None = n_head
    mlp: str | None = None  # swiglu | gelu; None: the style's (llama swiglu, gpt2 gelu)
    mlp_hidden: int | None = None  # None: int(8d/3) for a SwiGLU MLP, 4d for GELU (same size)
    bias: bool | None = None  # biases in linear layers and LayerNorms; None: False llama, True gpt2
    qkv_bias: bool | None = None  # biases in q, k, v only (Qwen2); None: as `bias`
    tie_embeddings: bool = True
    head_bias: bool = False  # an output bias (a folded final LayerNorm needs one)
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    hf_config: dict | None = None  # the Hugging Face config an import came from (for export_hf)
    norm: str = "default"  # what the norms are: default | dyt | fakeln | scale | folded
    dyt_alpha_attn: float | None = None  # DyT alpha0 of ln_1 (see the docstring)
    dyt_alpha_other: float | None = None  # DyT alpha0 of ln_2 and ln_f
    dyt_bias: bool = True  # DyT's per-feature bias (DYT_RECIPE: none)
    emb_scale: float | None = None  # a learnable scalar times the token embedding, starting here

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, why: str) -> None:
            if not ok:
                raise ValueError(f"GPTConfig.{field}: {why} (got {getattr(self, field)!r})")

        need(self.style in STYLES, "style", f"must be one of {STYLES}")
        need(self.taper in TAPERS, "taper", f"must be one of {TAPERS}")
        need(self.norm in NORMS, "norm", f"must be one of {NORMS}")
        if self.norm in EVERY_NORM:
            need(self.taper == "none", "taper", f"must be 'none' with norm {self.norm!r}")
        if self.norm in EXPORTED:
            need(self.taper != "none", "taper", f"must name the norms that norm {self.norm!r} is")
        for f in ("n_layer", "n_head", "n_embd", "vocab_size", "block_size"):
            need(isinstance(getattr(self, f), int) and getattr(self, f) > 0, f, "must be > 0")
        attn, other = dyt_alpha0(self.n_embd)
        if self.dyt_alpha_attn is None:
            self.dyt_alpha_attn = attn
        if self.dyt_alpha_other is None:
            self.dyt_alpha_other = other
        for f in ("dyt_alpha_attn", "dyt_alpha_other"):
            need(getattr(self, f) > 0, f, "must be > 0")
        need(self.emb_scale is None or self.emb_scale > 0, "emb_scale", "must be > 0 or None")
        need(self.n_embd % self.n_head == 0, "n_embd", f"must be divisible by n_head={self.n_head}")
        if self.n_kv_head is None:
            self.n_kv_head = self.n_head
        need(self.n_head % self.n_kv_head == 0, "n_kv_head", "must divide n_head")
        if self.mlp is None:
            self.mlp = "swiglu" if self.style == "llama" else "gelu"
        need(self.mlp in MLPS, "mlp", f"must be one of {MLPS}")
        if self.mlp_hidden is None:
            self.mlp_hidden = int(8 * self.n_embd / 3) if self.mlp == "swiglu" else 4 * self.n_embd
        need(self.mlp_hidden > 0, "mlp_hidden", "must be > 0")
        if self.bias is None:
            self.bias = self.style == "gpt2"
        if self.qkv_bias is None:
            self.qkv_bias = self.bias
        need(self.norm_eps >= 0, "norm_eps", "must be >= 0")
        if self.style == "llama":
            need(
                self.head_dim % 2 == 0, "n_head", "RoPE needs an even head dimension n_embd/n_head"
            )

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def norm_kind(self) -> str:
        return "rms" if self.style == "llama" else "layer"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        """The config a to_dict wrote; one written before `norm` took in the old `norm_mode`
        switch (taper | scale | folded) loads with its scale or folded as `norm` (with nothing
        tapered, such an export was a plain copy: norm default)."""
        d = dict(d)
        mode = d.pop("norm_mode", "taper")
        if mode != "taper" and d.get("taper", "none") != "none":
            if d.get("norm", "default") != "default":
                raise ValueError(f"GPTConfig: norm_mode {mode!r} with norm {d['norm']!r}")
            d["norm"] = mode
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"GPTConfig: unknown fields {sorted(unknown)}")
        return cls(**d)


def dyt_config(**fields) -> GPTConfig:
    """A GPTConfig with every norm a DyT, by DyT's LLaMA recipe (DYT_RECIPE); `fields` as GPTConfig's."""
    return GPTConfig(**{**DYT_RECIPE, **fields})


def make_norm(cfg: GPTConfig, tapered: bool, before_attn: bool = False) -> nn.Module:
    """The norm at one position (`tapered`: one `taper` names), by GPTConfig's table."""
    kind, d = cfg.norm_kind, cfg.n_embd
    if cfg.norm == "dyt":
        return DyT(d, cfg.dyt_alpha_attn if before_attn else cfg.dyt_alpha_other, cfg.dyt_bias)
    if cfg.norm == "fakeln":
        return FakeNorm(d, kind, cfg.norm_eps, cfg.bias)
    if not tapered:
        return RMSNorm(d, cfg.norm_eps) if kind == "rms" else LayerNorm(d, cfg.norm_eps, cfg.bias)
    if cfg.norm == "scale":
        return FixedScale(d, kind)
    if cfg.norm == "folded":
        return nn.Identity()
    return TaperNorm(d, kind, cfg.norm_eps)


def rope_tables(cfg: GPTConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sign-folded sin, (block_size, head_dim), for RoPE in HF Llama's rotate-half layout.

    rope(x) = x cos + rotate_half(x) sin, and rotate_half(x) sin = roll(x, hd/2) * [-sin_1, sin_2].
    """
    hd = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    angles = torch.outer(torch.arange(cfg.block_size, dtype=torch.float32), inv_freq)
    return torch.cat([angles, angles], -1).cos(), torch.cat([-angles.sin(), angles.sin()], -1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), signed_sin)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.hd = cfg.n_head, cfg.n_kv_head, cfg.head_dim
        qkv_dim = (cfg.n_head + 2 * cfg.n_kv_head) * self.hd
        self.qkv = nn.Linear(cfg.n_embd, qkv_dim, bias=cfg.qkv_bias)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)

    def heads(
        self, x: torch.Tensor, rope=None, linear: Linear = layer_linear
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of x (B, T, C) as (B, heads, T, head_dim), with RoPE applied to q and k."""
        B, T, _ = x.shape
        H, Hkv = self.n_head, self.n_kv_head
        qkv = linear(self.qkv, x).view(B, T, H + 2 * Hkv, self.hd).transpose(1, 2)
        # split, not slicing: its backward concatenates the gradients (a slice's zero-fills a
        # full-size buffer per slice and adds them up: ~1.5% of a training step at d=64)
        qk, v = qkv.split([H + Hkv, Hkv], dim=1)
        q, k = (qk if rope is None else apply_rope(qk, *rope)).split([H, Hkv], dim=1)
        return q, k, v

    def forward(
        self, x, rope=None, cache=None, pos: int | torch.Tensor = 0, linear: Linear = layer_linear
    ) -> torch.Tensor:
        """x (B, T, C) at positions pos.. -> (B, T, C). With a layer's KV cache (decode.KVCache)
        this chunk's keys and values are written to it and attention covers the cached ones, under
        the mask the cache gives (None: causal within the chunk). `linear` computes the
        projections (the eager decode step's kernels: decode.step_linear)."""
        B, T, C = x.shape
        q, k, v = self.heads(x, rope, linear)
        mask = None
        if cache is not None:
            k, v, mask = cache.update(k, v, pos)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=mask is None and T > 1,
            enable_gqa=self.n_kv_head != self.n_head,
        )
        return linear(self.proj, y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    """swiglu (llama's): w_out(silu(w_gate(x)) * w_in(x)).  gelu (gpt2's): w_out(gelu(w_in(x)))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.w_gate = None
        if cfg.mlp == "swiglu":  # two separate input matrices: faster than one fused and split
            self.w_gate = nn.Linear(cfg.n_embd, cfg.mlp_hidden, bias=cfg.bias)
        self.w_in = nn.Linear(cfg.n_embd, cfg.mlp_hidden, bias=cfg.bias)
        self.w_out = nn.Linear(cfg.mlp_hidden, cfg.n_embd, bias=cfg.bias)

    def inputs(self) -> list[nn.Linear]:
        """The projections that read the MLP's input (where a norm before it folds)."""
        return [self.w_in] if self.w_gate is None else [self.w_gate, self.w_in]

    def forward(self, x: torch.Tensor, linear: Linear = layer_linear) -> torch.Tensor:
        """`linear` computes the projections (by default each layer itself)."""
        if self.w_gate is not None:
            return linear(self.w_out, F.silu(linear(self.w_gate, x)) * linear(self.w_in, x))
        return linear(self.w_out, F.gelu(linear(self.w_in, x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        internal = cfg.taper in ("internal", "all")
        self.ln_1, self.attn = make_norm(cfg, internal, before_attn=True), Attention(cfg)
        self.ln_2, self.mlp = make_norm(cfg, internal), MLP(cfg)

    def forward(
        self, x, rope=None, cache=None, pos: int | torch.Tensor = 0, linear: Linear = layer_linear
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), rope, cache, pos, linear)
        return x + self.mlp(self.ln_2(x), linear)


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = cfg = config
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.emb_scale = (
            None if cfg.emb_scale is None else nn.Parameter(torch.tensor(cfg.emb_scale))
        )
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.style == "gpt2" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = make_norm(cfg, cfg.taper in ("final", "all"))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=cfg.head_bias)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        if cfg.style == "llama":
            cos, sin = rope_tables(cfg)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith(("attn.proj.weight", "mlp.w_out.weight")):
                nn.init.normal_(p, 0.0, INIT_STD / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, INIT_STD)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, INIT_STD)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """The token embeddings of idx (times emb_scale where the model has one)."""
        x = self.tok_emb(idx)
        return x if self.emb_scale is None else x * self.emb_scale

    def hidden(
        self,
        idx: torch.Tensor,
        cache: list | None = None,
        pos: int | torch.Tensor = 0,
        linear: Linear = layer_linear,
    ) -> torch.Tensor:
        """The pre-logit residual stream h_L (input of the final norm), shape (B, T, d). With
        `cache` (one KV cache per layer, decode.new_cache) idx sits at positions pos..; a tensor
        `pos` holds the positions of idx's T tokens (fixed shapes for torch.compile: StaticDecoder).
        `linear` computes every projection (the eager decode step's kernels: decode.step_linear)."""
        T = idx.shape[1]
        if isinstance(pos, int) and pos + T > self.config.block_size:
            raise ValueError(
                f"sequence of {pos + T} tokens exceeds block_size {self.config.block_size}"
            )
        x, rope = self.embed(idx), None
        if self.pos_emb is not None:
            where = torch.arange(pos, pos + T, device=idx.device) if isinstance(pos, int) else pos
            x = x + self.pos_emb(where)
        else:
            at = slice(pos, pos + T) if isinstance(pos, int) else pos
            rope = (self.rope_cos[at].to(x.dtype), self.rope_sin[at].to(x.dtype))
        for i, block in enumerate(self.blocks):
            x = block(x, rope, None if cache is None else cache[i], pos, linear)
        return x

    def head(self, h: torch.Tensor, linear: Linear = layer_linear) -> torch.Tensor:
        """logits = ln_f(h) @ W_out (+ b)."""
        return linear(self.lm_head, self.ln_f(h))

    def forward(self, idx: torch.Tensor, return_hidden: bool = False):
        """idx (B, T) -> logits (B, T, vocab); with return_hidden, (logits, h_L)."""
        h = self.hidden(idx)
        logits = self.head(h)
        return (logits, h) if return_hidden else logits

    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        return_logits: bool = False,
        compile: bool = False,
    ):
        """Decode with a preallocated KV cache (the engine in decode.py): temperature 0.0 is greedy,
        else sampling from softmax(logits / temperature), over the top_k logits if given, drawing
        from `generator`.

        compile=True runs each step as one torch.compile'd graph (CUDA graphs on a GPU); the first
        call for a batch size and length compiles (seconds to a minute), later ones reuse it.
        Returns (B, T + max_new_tokens) tokens; with return_logits also the logits that chose each new
        token, (B, max_new_tokens, vocab).
        """
        return decode.generate(
            self, idx, max_new_tokens, temperature, top_k, generator, return_logits, compile
        )


def convert_norms(model: GPT, taper: str, norm: str = "default") -> GPT:
    """A copy of `model` whose norms are tapered as `taper` says, gate 1: the same function as before.

    A new TaperNorm takes gamma (and beta) from the norm it replaces and gamma_tilde = gamma; its c is
    calibrated during the steps at g = 1 as usual. This is the TaperLN conversion for fine-tuning.
    norm="fakeln" makes every norm a live FakeNorm instead (the FakeLN protocol, fakeln.py).
    """
    cfg = model.config
    if cfg.norm in EXPORTED:
        raise ValueError(f"convert_norms needs an unexported model, got norm {cfg.norm!r}")
    if cfg.norm != "default" or norm == "dyt":
        raise ValueError(
            f"convert_norms: cannot turn norm {cfg.norm!r} into {norm!r} with the same function "
            "(DyT is trained from scratch)"
        )
    new = GPT(replace(cfg, taper=taper, norm=norm)).to(
        model.tok_emb.weight.device, model.tok_emb.weight.dtype
    )
    old_state, new_state = model.state_dict(), new.state_dict()
    for key in new_state:
        if key in old_state and old_state[key].shape == new_state[key].shape:
            new_state[key] = old_state[key]
        elif key.endswith(".weight_tilde") and key.replace("weight_tilde", "weight") in old_state:
            new_state[key] = old_state[key.replace("weight_tilde", "weight")]
    new.load_state_dict(new_state)
    return new
