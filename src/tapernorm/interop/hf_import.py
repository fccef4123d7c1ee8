"""Import pretrained Hugging Face GPT-2, Llama, Mistral and Qwen2 checkpoints into our GPT.

    model = load_hf("gpt2-medium", taper="all")          # hub id (needs the hub or its cache)
    model = load_hf("/data/ckpt/llama-tiny")             # a directory written by save_pretrained
    model = load_hf(hf_model)                            # a GPT2LMHeadModel / LlamaForCausalLM / ...

The returned GPT computes the same function as the checkpoint; its config keeps the HF config
(`GPTConfig.hf_config`) so that export_hf can write the same architecture back. A setting our GPT
does not model (RoPE scaling, a head_dim other than d / n_head, other activations, a sliding
window shorter than the context) is an error naming it, never silently dropped. Mistral and Qwen2
sliding windows: the GPT's block_size is capped at the window, so that within it the window never
masks anything. With `taper`, the chosen norms
become TaperNorm with gamma_tilde := gamma (and beta copied) at gate 1, which is still exactly the
pretrained norm: the TaperLN conversion used to fine-tune GPT-2. transformers is an optional
dependency and is imported lazily.

How a string is resolved: an existing directory is loaded locally. A string that is not a
directory but looks like a hub id ("name" or "owner/name": no leading "/", ".", "~", at most one
"/") is fetched from the hub (or its local cache); if the hub cannot be reached (HF_HUB_OFFLINE
set, or a 3 s TCP probe of the endpoint fails), HFUnavailableError. Anything else is a missing
local path: FileNotFoundError.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..model import GPT, GPTConfig
from ..runtime.digests import safetensors_header
from . import hub

SUPPORTED = ("gpt2", "llama", "mistral", "qwen2")  # HF model_type values we import
LLAMA_FAMILY = {  # model_type: HF class name (Llama's block, with the differences handled below)
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


class HFMappingError(RuntimeError):
    """A Hugging Face checkpoint lacks weights our model of its architecture needs."""


class UnsupportedModel(NotImplementedError):
    """A Hugging Face model of an architecture, or with a setting, that tapernorm's GPT does not
    model: says which, and what is supported (one line on the command line)."""


class HFUnavailableError(RuntimeError):
    """A hub id was given but the Hugging Face hub (and a cached copy) could not be reached."""


def load_hf(model_or_path: Any, taper: str = "none", dtype: torch.dtype = torch.float32) -> GPT:
    """A GPT (eval mode, `dtype`) with the weights of a HF GPT-2, Llama, Mistral or Qwen2 LM."""
    try:
        import transformers
    except ImportError as e:
        raise ImportError(
            "tapernorm.interop.hf_import.load_hf needs transformers: pip install transformers "
            "(or pip install 'tapernorm[hf]')"
        ) from e
    if not dtype.is_floating_point:
        raise ValueError(f"load_hf: dtype must be a floating point dtype, got {dtype}")
    hf = _resolve(model_or_path) if isinstance(model_or_path, (str, os.PathLike)) else model_or_path
    family = {getattr(transformers, name): kind for kind, name in LLAMA_FAMILY.items()}
    if isinstance(hf, transformers.GPT2LMHeadModel):
        config, weights = _gpt2(hf, taper)
    elif type(hf) in family:
        config, weights = _llama(hf, taper, family[type(hf)])
    else:
        raise UnsupportedModel(
            f"load_hf: unsupported model {type(hf).__name__}; supported: transformers' "
            f"GPT2LMHeadModel, {', '.join(LLAMA_FAMILY.values())}"
        )
    config.hf_config = hf_config_dict(hf.config)
    return _build(config, weights, dtype)


def hf_config_dict(config: Any) -> dict:
    """A transformers config as a plain JSON-able dict (the form GPTConfig.hf_config keeps)."""
    return json.loads(config.to_json_string(use_diff=False))


# ---- resolving strings -----------------------------------------------------------------------


def _resolve(src: str | os.PathLike) -> nn.Module:
    src = os.fspath(src)
    if os.path.isdir(src):
        return _load_pretrained(src, local_files_only=True)
    if os.path.exists(src):
        raise FileNotFoundError(
            f"load_hf: {src!r} is a file; pass the directory written by save_pretrained"
        )
    if not _HUB_ID.match(src) or ".." in src:
        raise FileNotFoundError(
            f"load_hf: local directory {src!r} does not exist (and it is not a hub id like "
            "'gpt2' or 'owner/name')"
        )
    asked_offline = hub.offline("TRANSFORMERS_OFFLINE")
    offline = asked_offline or not hub.reachable()
    try:
        return _load_pretrained(src, local_files_only=offline)
    except OSError as e:  # transformers reports hub and cache failures as OSError
        if not offline and not _is_connection_error(e):
            raise
        raise HFUnavailableError(
            f"load_hf: could not load {src!r}: the Hugging Face hub is unreachable "
            f"({'offline mode' if asked_offline else 'no network'}) and no cached copy was found. "
            "If you meant a local directory, it does not exist. To supply a local copy, run on a "
            'machine with internet: python -c "from transformers import '
            f"AutoModelForCausalLM as M; M.from_pretrained('{src}').save_pretrained('PATH')\", "
            "copy PATH here and pass load_hf('PATH')."
        ) from e


def _load_pretrained(src: str, local_files_only: bool) -> nn.Module:
    """The model of a save_pretrained directory or hub id, its weights checked against its config:
    a weight file cut short, a weight the config needs and the files lack (transformers would
    initialise it at random), or a layer beyond the config's, is an error naming them."""
    import transformers

    if os.path.isdir(src):
        for path in sorted(Path(src).glob("*.safetensors")):
            _check_safetensors(path)
    config = transformers.AutoConfig.from_pretrained(src, local_files_only=local_files_only)
    classes = {k: getattr(transformers, v) for k, v in LLAMA_FAMILY.items()}
    classes["gpt2"] = transformers.GPT2LMHeadModel
    if config.model_type not in classes:
        raise UnsupportedModel(
            f"load_hf: {src} is a {config.model_type!r} model ({', '.join(config.architectures or [])}"
            f"), an architecture tapernorm does not import; supported model_type: "
            f"{', '.join(SUPPORTED)} (causal LMs with pre-norm blocks)"
        )
    cls = classes[config.model_type]
    with _quiet_transformers():  # its load report would stand above the line refusing the model
        model, info = cls.from_pretrained(
            src, config=config, local_files_only=local_files_only, output_loading_info=True
        )
    layers = config.num_hidden_layers
    beyond = [k for k in info["unexpected_keys"] if (_layer_of(k) or 0) >= layers]
    problems = []
    if info["missing_keys"]:
        problems.append(f"missing {sorted(info['missing_keys'])[:3]}")
    if beyond:
        problems.append(f"layers beyond its {layers}: {sorted(beyond)[:3]}")
    if info["mismatched_keys"]:
        problems.append(f"other shapes: {sorted(info['mismatched_keys'])[:3]}")
    if problems:
        raise ValueError(
            f"load_hf: the weights of {src} do not match its config.json ({layers} layers, "
            f"vocab_size {config.vocab_size}): {'; '.join(problems)}"
        )
    return model


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' logging at errors only for the block, its verbosity restored after it."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _layer_of(key: str) -> int | None:
    found = re.search(r"\.(?:h|layers)\.(\d+)\.", key)
    return int(found.group(1)) if found else None


def _check_safetensors(path: Path) -> None:
    """ValueError naming `path` unless its header parses and its tensors fill the file exactly."""
    try:
        with open(path, "rb") as f:
            header, start = safetensors_header(f)
        header.pop("__metadata__", None)
        end = max((entry["data_offsets"][1] for entry in header.values()), default=0)
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise ValueError(f"load_hf: {path} is not a whole safetensors file ({e})") from None
    size = path.stat().st_size
    if size != start + end:
        raise ValueError(
            f"load_hf: {path} is truncated or damaged: its header says {start + end} bytes, the "
            f"file has {size}; copy it again, or save the model again with save_pretrained"
        )


def _is_connection_error(e: BaseException) -> bool:
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    for _ in range(20):  # walk the exception chain (bounded: chains can be cyclic)
        if e is None:
            return False
        if isinstance(e, (LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError)):
            return True
        e = e.__cause__ or e.__context__
    return False


# ---- architectures ---------------------------------------------------------------------------


def _unsupported(arch: str, what: str) -> UnsupportedModel:
    return UnsupportedModel(
        f"load_hf: this {arch} checkpoint has {what}, which tapernorm's GPT does not model"
    )


def _gpt2(hf: nn.Module, taper: str) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    c = hf.config
    if c.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        raise _unsupported(
            "GPT-2",
            f"activation_function={c.activation_function!r} "
            "(only the tanh GELU: gelu_new / gelu_pytorch_tanh)",
        )
    for flag, want in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("reorder_and_upcast_attn", False),
        ("add_cross_attention", False),
    ):
        if bool(getattr(c, flag, want)) != want:
            raise _unsupported("GPT-2", f"{flag}={getattr(c, flag)!r} (only {flag}={want})")
    tie = bool(getattr(c, "tie_word_embeddings", True))
    config = GPTConfig(
        style="gpt2",
        n_layer=c.n_layer,
        n_head=c.n_head,
        n_embd=c.n_embd,
        vocab_size=c.vocab_size,
        block_size=c.n_positions,
        taper=taper,
        mlp_hidden=c.n_inner or 4 * c.n_embd,
        bias=True,
        tie_embeddings=tie,
        norm_eps=c.layer_norm_epsilon,
    )
    t = hf.transformer
    w = {"tok_emb.weight": t.wte.weight, "pos_emb.weight": t.wpe.weight}
    w["lm_head.weight"] = t.wte.weight if tie else hf.lm_head.weight
    for i, blk in enumerate(t.h):
        p = f"blocks.{i}"
        for ours, conv in (
            ("attn.qkv", blk.attn.c_attn),
            ("attn.proj", blk.attn.c_proj),
            ("mlp.w_in", blk.mlp.c_fc),
            ("mlp.w_out", blk.mlp.c_proj),
        ):
            w[f"{p}.{ours}.weight"] = conv.weight.t()  # Conv1D stores (in, out)
            w[f"{p}.{ours}.bias"] = conv.bias
        _norm_from_hf(w, f"{p}.ln_1", blk.ln_1.weight, blk.ln_1.bias)
        _norm_from_hf(w, f"{p}.ln_2", blk.ln_2.weight, blk.ln_2.bias)
    _norm_from_hf(w, "ln_f", t.ln_f.weight, t.ln_f.bias)
    return config, w


def _llama(hf: nn.Module, taper: str, kind: str) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """Llama, Mistral (no biases, sliding window) and Qwen2 (q/k/v biases, per-layer windows)."""
    c, arch = hf.config, type(hf).__name__
    if c.hidden_act not in ("silu", "swish"):
        raise _unsupported(arch, f"hidden_act={c.hidden_act!r} (only silu)")
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if head_dim * c.num_attention_heads != c.hidden_size:
        raise _unsupported(
            arch,
            f"head_dim={head_dim} != hidden_size / num_attention_heads "
            f"= {c.hidden_size} / {c.num_attention_heads}",
        )
    theta, rope = _llama_rope(c)
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise _unsupported(arch, f"RoPE scaling {rope} (only the default RoPE)")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        raise _unsupported(arch, f"partial_rotary_factor={rope['partial_rotary_factor']}")
    for module, _ in hf.named_modules():
        if module.endswith(("q_norm", "k_norm")):
            raise _unsupported(arch, f"QK-norm ({module})")
    if kind == "llama":
        qkv_bias = bool(c.attention_bias)
        bias = qkv_bias or bool(getattr(c, "mlp_bias", False))
    else:  # Mistral: no biases; Qwen2: biases in q, k, v only
        qkv_bias, bias = kind == "qwen2", False
    tie = bool(c.tie_word_embeddings)
    config = GPTConfig(
        style="llama",
        n_layer=c.num_hidden_layers,
        n_head=c.num_attention_heads,
        n_embd=c.hidden_size,
        vocab_size=c.vocab_size,
        block_size=min(c.max_position_embeddings, _sliding_window(c) or c.max_position_embeddings),
        taper=taper,
        n_kv_head=c.num_key_value_heads,
        mlp_hidden=c.intermediate_size,
        # our `bias` flag covers every linear layer: biases HF lacks are loaded as zeros
        bias=bias,
        qkv_bias=qkv_bias,
        tie_embeddings=tie,
        norm_eps=c.rms_norm_eps,
        rope_theta=theta,
    )
    m = hf.model
    w = {"tok_emb.weight": m.embed_tokens.weight}
    w["lm_head.weight"] = m.embed_tokens.weight if tie else hf.lm_head.weight
    for i, layer in enumerate(m.layers):
        p, a, f = f"blocks.{i}", layer.self_attn, layer.mlp
        _linear_from_hf(w, f"{p}.attn.qkv", config.qkv_bias, a.q_proj, a.k_proj, a.v_proj)
        _linear_from_hf(w, f"{p}.attn.proj", config.bias, a.o_proj)
        _linear_from_hf(w, f"{p}.mlp.w_gate", config.bias, f.gate_proj)
        _linear_from_hf(w, f"{p}.mlp.w_in", config.bias, f.up_proj)
        _linear_from_hf(w, f"{p}.mlp.w_out", config.bias, f.down_proj)
        _norm_from_hf(w, f"{p}.ln_1", layer.input_layernorm.weight)
        _norm_from_hf(w, f"{p}.ln_2", layer.post_attention_layernorm.weight)
    _norm_from_hf(w, "ln_f", m.norm.weight)
    return config, w


def _sliding_window(c: Any) -> int | None:
    """The attention window a Mistral / Qwen2 config applies in some layer (None: none)."""
    window = getattr(c, "sliding_window", None)
    layer_types = getattr(c, "layer_types", None)
    if window is None or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    return int(window)


def _llama_rope(c: Any) -> tuple[float, dict]:
    """(rope_theta, rope parameters) from a transformers 5 (`rope_parameters`) or 4.x config."""
    params = getattr(c, "rope_parameters", None)
    if params is None:  # transformers 4.x: rope_theta attribute, optional rope_scaling dict
        params = dict(getattr(c, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(c, "rope_theta", 10000.0))
    return float(params.get("rope_theta", 10000.0)), dict(params)


# ---- helpers ---------------------------------------------------------------------------------


def _linear_from_hf(w: dict, name: str, bias: bool, *parts: nn.Linear) -> None:
    """Row-concatenate HF nn.Linear layers into our fused one (missing biases become zeros)."""
    w[f"{name}.weight"] = torch.cat([p.weight for p in parts], dim=0)
    if bias:
        w[f"{name}.bias"] = torch.cat(
            [p.bias if p.bias is not None else p.weight.new_zeros(p.out_features) for p in parts]
        )


def _norm_from_hf(
    w: dict, name: str, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> None:
    """gamma (and beta); a TaperNorm also gets gamma_tilde := gamma (dropped if not a TaperNorm)."""
    w[f"{name}.weight"] = weight
    w[f"{name}.weight_tilde"] = weight
    if bias is not None:
        w[f"{name}.bias"] = bias


def _build(config: GPTConfig, weights: dict[str, torch.Tensor], dtype: torch.dtype) -> GPT:
    model = GPT(config)
    sd = model.state_dict()  # TaperNorm buffers (gate 1, c, calibration state) keep defaults
    for key, value in weights.items():
        if key.endswith(".weight_tilde") and key not in sd:
            continue  # that norm is not tapered
        if key not in sd:
            raise KeyError(f"load_hf: mapped key {key!r} is not in GPT's state dict")
        if tuple(value.shape) != tuple(sd[key].shape):
            raise ValueError(
                f"load_hf: {key}: HF shape {tuple(value.shape)} != ours {tuple(sd[key].shape)}"
            )
        sd[key] = value.detach().to(torch.float32)
    params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    unmapped = sorted(params - weights.keys())
    if unmapped:
        raise HFMappingError(f"load_hf: no HF weights for {unmapped}")
    model.load_state_dict(sd, strict=True)
    return model.to(dtype).eval()
