"""Export a norm-free GPT (every norm a TaperNorm at g = 0) as a stock Hugging Face checkpoint.

    report = export_hf(model, "out/hf")          # then AutoModelForCausalLM.from_pretrained("out/hf")

The architecture is the one the model came from (GPTConfig.hf_config: an imported Qwen2 exports as
Qwen2ForCausalLM, Mistral as MistralForCausalLM); a model trained here exports by its style, llama ->
LlamaForCausalLM, gpt2 -> GPT2LMHeadModel. No remote code: the stock norms stay, made constant.

The huge-epsilon trick. At g = 0 a tapered norm is h -> c h gamma_tilde (rms) or beta + c (h - mu)
gamma_tilde (layer; the mean is still subtracted, as a stock LayerNorm does). A stock norm with
epsilon E computes h / sqrt(m + E) * w (+ b), m = mean(h^2) (rms) or var(h) (layer). With
E = 2^66 and w = 2^33 c gamma_tilde it computes h * (sqrt(E / (m + E))) c gamma_tilde, relative error

    1 - sqrt(E / (m + E)) = m / (2E) + O((m/E)^2)        (about 7e-21 m).

In floating point it is better than that: the norms compute m + E in float32 (transformers' RMSNorms
upcast; torch's LayerNorm accumulates bf16 inputs in float32), and m + E rounds to E exactly while
m < E 2^-25 = 2^41 (an activation RMS below 1.4e6). Then 1/sqrt(m + E) = 2^-33 exactly and, sqrt(E)
being a power of two, w = 2^33 (c gamma_tilde) and h 2^-33 carry no rounding beyond that of c
gamma_tilde itself: the export is as exact as the g = 0 model, in float32 and in bf16 alike (bf16
only rounds the stored gains, as it would c gamma_tilde). Range: h 2^-33 underflows float32/bf16
only for |h| < 1e-28, and the gains 2^33 c gamma_tilde (~1e10) are far below the float32/bf16 maximum
(3e38). float16 (maximum 65504) cannot hold them: load an export in float32 or bfloat16. The verify
report gives the largest m seen (`norm_input_max_ms`) and the bound m / (2E).

Why not fold instead: the stock architectures always apply their norms, and one epsilon serves every
norm of a model, so a model with a real norm left (Internal-Taper's final norm, any gate != 0) has no
stock form; those export to our own format with `tapernorm fold`.
"""

from __future__ import annotations

import copy
import logging
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from ..fold import _g0_map, compare_logits
from ..model import GPT, GPTConfig
from ..norms import FixedScale, TaperNorm
from ..runtime.atomic import plain_modes
from ..runtime.jsonio import read_json, write_json
from ..runtime.out_dirs import (
    claim_dir,
    install_dir,
    is_temporary,
    json_with,
    make_aside,
)

log = logging.getLogger(__name__)

EXPORT_EPS = 2.0**66  # the stock norms' epsilon; sqrt(EXPORT_EPS) = 2^33 is a power of two
GAIN = 2.0**33
ARCHITECTURES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
}


# the files an export writes (save_pretrained's, the tokenizer's, the card, verify.json): what a
# later export into the same directory replaces; every other file there is left alone
EXPORT_FILES = re.compile(
    r"(config|generation_config|verify|tokenizer|tokenizer_config|special_tokens_map|vocab|"
    r"added_tokens)\.json|model(-\d+-of-\d+)?\.safetensors(\.index\.json)?|README\.md|"
    r"tokenizer\.model|merges\.txt|chat_template\.jinja"
)


def is_export_file(name: str) -> bool:
    return bool(EXPORT_FILES.fullmatch(name)) or is_temporary(name)


def is_export_dir(path: Path) -> bool:
    """Whether `path` holds an export of export_hf (or a skipped one): its verify.json, or (which
    Snakemake deletes before a rerun) a config.json with the export's norm epsilon, 2^66."""
    verify = Path(path) / "verify.json"
    if json_with(verify, ("architecture", "ok")) or json_with(verify, ("model", "skipped")):
        return True
    try:
        config = read_json(Path(path) / "config.json")
    except (OSError, ValueError):
        return False
    eps = ("rms_norm_eps", "layer_norm_epsilon")
    return isinstance(config, dict) and any(config.get(k) == EXPORT_EPS for k in eps)


def leftovers(path: Path) -> list[Path]:
    """The directories a killed export into `path` left beside it: `.NAME.<8 hex>.tmp` (make_aside's
    names for `path`) holding only an export's files; nothing else is one (a kept `.failed`
    export, a directory holding another file, a link)."""
    path = Path(path)
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[0-9a-f]{{8}}\.tmp")
    if not path.parent.is_dir():
        return []
    found = []
    for entry in sorted(path.parent.iterdir()):
        if not pattern.fullmatch(entry.name) or entry.is_symlink() or not entry.is_dir():
            continue
        inside = list(entry.iterdir())
        if all(p.is_file() and not p.is_symlink() and is_export_file(p.name) for p in inside):
            found.append(entry)
    return found


def remove_leftovers(path: Path) -> list[Path]:
    """Remove leftovers(path), said in the log; only under the export's lock (export_lock), where
    no other export into `path` is writing one."""
    gone = leftovers(path)
    for entry in gone:
        shutil.rmtree(entry)
        log.info("export-hf: removed %s, left by an export into %s that was killed", entry, path)
    return gone


def claim_export_dir(path: Path, force: bool = False) -> None:
    """Refuse (PathInUse) an export directory holding files of something else, unless `force`."""
    claim_dir(Path(path), "export-hf", is_export_dir, force)


class ExportError(RuntimeError):
    """The model has no stock Hugging Face form (a real norm left, a bias the target lacks, ...)."""


class ExportVerificationError(RuntimeError):
    """The exported checkpoint, loaded by stock transformers, disagrees with the model."""


def norm_names(cfg: GPTConfig) -> list[str]:
    return [f"blocks.{i}.ln_{j}" for i in range(cfg.n_layer) for j in (1, 2)] + ["ln_f"]


def _fixed_maps(model: GPT) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    """(scale, shift) of every norm; ExportError if one is still a real normalization."""
    if model.config.norm == "folded":
        raise ExportError(
            "export_hf: the model is folded (its norms live in the projections); "
            "export the unfolded g=0 model instead"
        )
    real = []
    for name in norm_names(model.config):
        norm = model.get_submodule(name)
        if isinstance(norm, TaperNorm) and float(norm.gate) != 0.0:
            real.append(f"{name} (TaperNorm at gate {float(norm.gate):g})")
        elif not isinstance(norm, (TaperNorm, FixedScale)):
            real.append(f"{name} ({type(norm).__name__})")
    if real:
        shown = ", ".join(real[:3]) + (f" and {len(real) - 3} more" if len(real) > 3 else "")
        raise ExportError(
            f"export_hf: {shown} still normalize per token. A stock checkpoint applies every "
            "norm with one epsilon, so it can express either real norms or fixed scales, not a "
            "mix: only a model whose every norm is a TaperNorm at g=0 (taper='all', the taper "
            "finished) exports. Internal-Taper models fold into our own format: tapernorm fold."
        )
    return {name: _g0_map(model.get_submodule(name))[:2] for name in norm_names(model.config)}


def hf_kind(cfg: GPTConfig) -> str:
    """The HF model_type a GPT exports as: its source's, else by style."""
    kind = cfg.hf_config["model_type"] if cfg.hf_config else cfg.style
    if kind not in ARCHITECTURES:
        raise ExportError(f"export_hf: no export for HF model_type {kind!r}")
    return kind


def hf_config_for(cfg: GPTConfig):
    """The transformers config of the export: the source config (or one by style) with our shapes
    and the huge norm epsilon."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    kind = hf_kind(cfg)
    if cfg.mlp != ("gelu" if kind == "gpt2" else "swiglu"):
        raise ExportError(f"export_hf: a {cfg.mlp} MLP has no form in HF model_type {kind!r}")
    src = {k: v for k, v in (cfg.hf_config or {}).items() if k not in ("torch_dtype", "model_type")}
    src.update(vocab_size=cfg.vocab_size, tie_word_embeddings=cfg.tie_embeddings, dtype="float32")
    src["architectures"] = [ARCHITECTURES[kind]]
    if kind == "gpt2":
        if cfg.n_kv_head != cfg.n_head:
            raise ExportError("export_hf: GPT-2 has no grouped-query attention (n_kv_head)")
        if not cfg.hf_config and cfg.vocab_size <= 50256:  # GPT-2's end-of-text id is not ours
            src.update(bos_token_id=None, eos_token_id=None)
        src.setdefault("n_positions", cfg.block_size)
        src.setdefault("activation_function", "gelu_new")
        src.update(n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd)
        src.update(n_inner=cfg.mlp_hidden, layer_norm_epsilon=EXPORT_EPS)
    else:
        src.setdefault("max_position_embeddings", cfg.block_size)
        src.setdefault("hidden_act", "silu")
        src.setdefault("rope_parameters", {"rope_type": "default", "rope_theta": cfg.rope_theta})
        if kind == "llama" and not cfg.hf_config:
            src.update(attention_bias=bool(cfg.bias or cfg.qkv_bias), mlp_bias=bool(cfg.bias))
        src.update(
            hidden_size=cfg.n_embd,
            intermediate_size=cfg.mlp_hidden,
            num_hidden_layers=cfg.n_layer,
            num_attention_heads=cfg.n_head,
            num_key_value_heads=cfg.n_kv_head,
            head_dim=cfg.head_dim,
            rms_norm_eps=EXPORT_EPS,
        )
    return CONFIG_MAPPING[kind].from_dict(src)


def _linear_to_hf(
    d: dict, hf_keys: set, ours: dict, name: str, hf_names: list, sizes=None, conv1d=False
):
    """Our (fused) Linear `name` as HF's linears `hf_names`, split by output rows into `sizes`. A
    bias HF has and we lack is zero; a nonzero bias HF lacks is an ExportError."""
    w, b = ours[f"{name}.weight"], ours.get(f"{name}.bias")
    sizes = sizes or [w.shape[0]]
    bparts = b.split(sizes) if b is not None else [None] * len(sizes)
    for hf_name, wp, bp in zip(hf_names, w.split(sizes), bparts, strict=True):
        d[f"{hf_name}.weight"] = wp.t() if conv1d else wp  # GPT-2's Conv1D stores (in, out)
        if f"{hf_name}.bias" in hf_keys:
            d[f"{hf_name}.bias"] = bp if bp is not None else wp.new_zeros(wp.shape[0])
        elif bp is not None and bp.abs().max() > 0:
            raise ExportError(f"export_hf: {name}.bias is nonzero but {hf_name} has no bias")


def _hf_state(model: GPT, kind: str, hf_keys: set) -> dict[str, torch.Tensor]:
    """The export's HF state dict: our weights renamed, norm gains 2^33 c gamma_tilde."""
    cfg = model.config
    ours = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    norms = {k: (s.float().cpu() * GAIN, b) for k, (s, b) in _fixed_maps(model).items()}
    d: dict[str, torch.Tensor] = {"lm_head.weight": ours["lm_head.weight"]}
    if kind == "gpt2":
        d["transformer.wte.weight"] = ours["tok_emb.weight"]
        d["transformer.wpe.weight"] = ours["pos_emb.weight"]
        layers, ln = "transformer.h", {"ln_1": "ln_1", "ln_2": "ln_2", "ln_f": "transformer.ln_f"}
        linears = {"attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj"}
        linears.update({"mlp.w_in": "mlp.c_fc", "mlp.w_out": "mlp.c_proj"})
    else:
        d["model.embed_tokens.weight"] = ours["tok_emb.weight"]
        layers = "model.layers"
        ln = {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm", "ln_f": "model.norm"}
        linears = {"attn.proj": "self_attn.o_proj", "mlp.w_gate": "mlp.gate_proj"}
        linears.update({"mlp.w_in": "mlp.up_proj", "mlp.w_out": "mlp.down_proj"})
    kv = cfg.n_kv_head * cfg.head_dim
    for i in range(cfg.n_layer):
        p, q = f"blocks.{i}", f"{layers}.{i}"
        for our, theirs in linears.items():
            _linear_to_hf(d, hf_keys, ours, f"{p}.{our}", [f"{q}.{theirs}"], conv1d=kind == "gpt2")
        if kind != "gpt2":
            qkv = [f"{q}.self_attn.{x}_proj" for x in "qkv"]
            _linear_to_hf(d, hf_keys, ours, f"{p}.attn.qkv", qkv, sizes=[cfg.n_embd, kv, kv])
        for j in ("ln_1", "ln_2"):
            _norm_to_hf(d, f"{q}.{ln[j]}", *norms[f"{p}.{j}"])
    _norm_to_hf(d, ln["ln_f"], *norms["ln_f"])
    return d


def _norm_to_hf(d: dict, hf_name: str, gain: torch.Tensor, shift: torch.Tensor | None) -> None:
    """HF's norm `hf_name` as the fixed map gain (and shift) our g=0 norm computes."""
    d[f"{hf_name}.weight"] = gain
    if shift is not None:
        d[f"{hf_name}.bias"] = shift.float().cpu()


def to_hf(model: GPT) -> nn.Module:
    """The stock transformers model (float32, eval) that computes `model` (see module docstring)."""
    import transformers

    if model.config.emb_scale is not None:
        raise ExportError(
            "export_hf: the model multiplies its embedding by a learned scalar (emb_scale, DyT's "
            "recipe), which a stock checkpoint cannot express"
        )
    kind = hf_kind(model.config)
    hf = transformers.AutoModelForCausalLM.from_config(hf_config_for(model.config))
    hf_keys = set(hf.state_dict())
    state = _hf_state(model, kind, hf_keys)
    missing = hf_keys - set(state)
    if missing or set(state) - hf_keys:
        raise ExportError(
            f"export_hf: state dict mismatch with {type(hf).__name__}: missing "
            f"{sorted(missing)[:5]}, unexpected {sorted(set(state) - hf_keys)[:5]}"
        )
    hf.load_state_dict(state, strict=True)
    return hf.float().eval()


class _HFLogits(nn.Module):
    """A causal LM's logits as a plain tokens -> logits module (for compare_logits)."""

    def __init__(self, hf: nn.Module):
        super().__init__()
        self.hf = hf

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.hf(idx).logits


@torch.no_grad()
def verify_hf(
    model: GPT,
    hf: nn.Module,
    tokens: torch.Tensor | None = None,
    targets: torch.Tensor | None = None,
    rtol: float = 1e-4,
    new_tokens: int = 8,
) -> dict:
    """Compare `model` with a transformers LM in float32: logits, loss, greedy decoding, and the
    norm inputs' largest mean square m with the epsilon bound m / (2 EXPORT_EPS). Never raises."""
    device = next(model.parameters()).device
    ref = copy.deepcopy(model).float().eval()
    hf = hf.to(device).float().eval()
    if tokens is None:
        gen = torch.Generator().manual_seed(0)
        tokens = torch.randint(
            0, ref.config.vocab_size, (2, min(32, ref.config.block_size)), generator=gen
        )
    tokens = tokens.to(device)
    targets = None if targets is None else targets.to(device)
    ms = [0.0]

    def record(module: nn.Module, args: tuple) -> None:
        h = args[0].float()
        if getattr(module, "kind", "rms") == "layer":
            h = h - h.mean(-1, keepdim=True)
        ms[0] = max(ms[0], h.pow(2).mean(-1).max().item())

    hooks = [ref.get_submodule(n).register_forward_pre_hook(record) for n in norm_names(ref.config)]
    report = compare_logits(ref, _HFLogits(hf).eval(), tokens, targets)  # eval: no dropout
    for hook in hooks:
        hook.remove()
    report["loss_export"] = report.pop("loss_folded")
    prompt = tokens[:1, : min(8, tokens.shape[1])]
    n = max(0, min(new_tokens, ref.config.block_size - prompt.shape[1]))
    theirs = prompt
    for _ in range(n):  # greedy decoding, full forward passes (no cache) on the HF side
        theirs = torch.cat([theirs, hf(theirs).logits[:, -1:].argmax(-1)], dim=1)
    report["greedy_tokens"] = n
    report["greedy_match"] = bool(torch.equal(ref.generate(prompt, n), theirs))
    report["norm_input_max_ms"] = ms[0]
    report["norm_eps"] = EXPORT_EPS
    report["eps_rel_error_bound"] = ms[0] / (2 * EXPORT_EPS)
    report["rtol"] = rtol
    report["ok"] = (
        report.pop("finite") and report["rel_logit_diff"] <= rtol and report["greedy_match"]
    )
    return report


def export_hf(
    model: GPT,
    path: str | Path,
    tokens: torch.Tensor | None = None,
    targets: torch.Tensor | None = None,
    rtol: float = 1e-4,
    tokenizer=None,
    card: dict | None = None,
    force: bool = False,
    card_from: Callable[[Path], dict] | None = None,
) -> dict:
    """Write a norm-free GPT (every norm tapered, g = 0) as a stock HF checkpoint directory, load it
    back with AutoModelForCausalLM and verify it on `tokens` (default: random); returns the report.

    `path` gets save_pretrained's files, verify.json, README.md (a model card: `card`'s entries
    and the verify numbers) and the tokenizer's files if one is given (anything with
    save_pretrained). A verification beyond `rtol` raises ExportVerificationError and leaves the
    export in PATH.failed with its verify.json. A `path` holding files of something else is
    refused (PathInUse) unless `force`; an earlier export's files are replaced, no other file.
    `card_from`, if given, is called with the directory of the verified export before it is moved
    into place and returns more card entries (taper-hf's tails probe of the stock files).
    """
    path = Path(path)
    claim_export_dir(path, force)
    hf = to_hf(model)
    tmp = make_aside(path)
    try:
        return _write_export(
            model, hf, tmp, path, tokens, targets, rtol, tokenizer, card, card_from
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # (gone unless something failed)


def _write_export(
    model, hf, tmp, path, tokens, targets, rtol, tokenizer, card, card_from=None
) -> dict:
    """export_hf's writing: the export into `tmp`, verified, then installed as `path`."""
    import transformers

    hf.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    stock = transformers.AutoModelForCausalLM.from_pretrained(
        tmp, dtype=torch.float32, local_files_only=True
    )
    report = {
        "architecture": type(stock).__name__,
        **verify_hf(model, stock, tokens, targets, rtol),
    }
    write_json(tmp / "verify.json", report)
    if not report["ok"]:
        failed = _keep_failed(tmp, path)
        raise ExportVerificationError(
            f"export_hf: the stock {report['architecture']} disagrees with the model "
            f"(max relative logit difference {report['rel_logit_diff']:.3g} vs rtol {rtol:g}, "
            f"greedy match {report['greedy_match']}); the export and its verify.json are in {failed}"
        )
    if card_from is not None:
        card = {**(card or {}), **card_from(tmp)}
    (tmp / "README.md").write_text(model_card(report, card or {}))
    plain_modes(tmp)  # safetensors writes model.safetensors private (0o600)
    install_dir(tmp, path, is_export_file, "verify.json")
    return report


PAPER = (
    "arXiv 2602.10408"  # Gated Normalization Removal and Scale Anchoring in Pre-Norm Transformers
)
PAPER_URL = "https://arxiv.org/abs/2602.10408"
CARD_FACTS = ("base model", "taper schedule", "fold check", "export route")  # in the metadata too
VERIFY_KEYS = (
    "max_abs_logit_diff",
    "rel_logit_diff",
    "loss_reference",
    "loss_export",
    "loss_diff",
    "argmax_agreement",
    "greedy_match",
    "norm_input_max_ms",
    "eps_rel_error_bound",
)


def card_metadata(report: dict, card: dict) -> dict:
    """The model card's YAML metadata: the Hub's keys (base_model only for a Hub id) and a
    `tapernorm` entry naming the paper, the base model, the taper schedule, the fold check, the
    export route and the export's own check."""
    meta: dict = {
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["tapernorm", "norm-free", "arxiv:2602.10408"],
    }
    hub_id = card.get("hub id")
    if hub_id:
        meta["base_model"] = hub_id
    facts = {key.replace(" ", "_"): str(card.get(key, "unknown")) for key in CARD_FACTS}
    check = "passed" if report.get("ok") else "failed"
    meta["tapernorm"] = {
        "paper": f"{PAPER} ({PAPER_URL})",
        **facts,
        "export_check": f"{check}: relative logit difference {report['rel_logit_diff']:.3g} "
        f"(rtol {report['rtol']:g}), greedy decoding identical: {report['greedy_match']}",
    }
    return meta


def _keep_failed(tmp: Path, path: Path) -> Path:
    """Where a failed export is kept: PATH.failed (an earlier failed export there replaced), or
    its temporary directory if PATH.failed is something else."""
    failed = path.with_name(path.name + ".failed")
    if failed.exists() and not is_export_dir(failed):
        kept = tmp.with_name(tmp.name.removesuffix(".tmp") + ".failed")
        tmp.rename(kept)
        return kept
    shutil.rmtree(failed, ignore_errors=True)
    tmp.rename(failed)
    return failed


def _card_body(report: dict, card: dict) -> str:
    arch = report["architecture"]
    lines = [
        f"# {card.get('name', 'tapernorm export')}: a norm-free {arch}",
        "",
        f"Stock `transformers` {arch} (no remote code) exported by tapernorm's `export_hf`, the code",
        f"of [{PAPER}]({PAPER_URL}) (Gated Normalization Removal and Scale Anchoring in Pre-Norm",
        "Transformers). Every normalization of this model was tapered away (TaperNorm at gate 0, a",
        f"fixed per-channel map). The stock norms remain, with epsilon 2^66 = {EXPORT_EPS:.4g} so that",
        "they divide by the constant 2^33, and gains 2^33 c gamma_tilde: load it in float32 or",
        "bfloat16, not float16 (the gains overflow float16).",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in card.items() if k not in ("name", "hub id")]
    lines += ["", "## Verification (stock transformers vs tapernorm, float32)", ""]
    for key in VERIFY_KEYS:
        value = report[key]
        lines.append(f"- {key}: {value:.4g}" if isinstance(value, float) else f"- {key}: {value}")
    return "\n".join(lines) + "\n"


def model_card(report: dict, card: dict) -> str:
    """README.md of an export: YAML metadata (card_metadata) then where it came from and how well
    it verified; written with huggingface_hub's ModelCard when it is installed, else as plain text
    with the same front matter."""
    import yaml

    meta, body = card_metadata(report, card), _card_body(report, card)
    try:
        from huggingface_hub import ModelCard, ModelCardData
    except ImportError:
        front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
        return f"---\n{front}---\n\n{body}"
    data = ModelCardData(**meta)
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}"))
