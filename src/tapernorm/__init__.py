"""TaperNorm: gated normalization removal and scale anchoring in pre-norm transformers.

from tapernorm import GPT, GPTConfig, TaperNorm, set_gate, fold_model, load_hf, export_hf
from tapernorm import DyT   # the norm-free alternative (GPTConfig(norm="dyt")); it does not fold
"""

from .anchor import ScaleAnchor
from .export import export_hf
from .fold import export_explicit_scaling, fold_model, verify_fold
from .model import GPT, GPTConfig
from .norms import (
    DyT,
    LayerNorm,
    RMSNorm,
    TaperNorm,
    freeze,
    set_gate,
    start_taper,  # the former name of freeze
    update_calibration,
)

__version__ = "0.1.0"


def load_hf(model_or_path, taper: str = "none", **kwargs) -> GPT:
    """A Hugging Face GPT-2 / Llama / Mistral / Qwen2 causal LM (object, local dir or hub id) as a
    GPT."""
    from .hf import load_hf as _load_hf  # transformers is imported only when asked for

    return _load_hf(model_or_path, taper=taper, **kwargs)


__all__ = [
    "DyT",
    "GPT",
    "GPTConfig",
    "LayerNorm",
    "RMSNorm",
    "ScaleAnchor",
    "TaperNorm",
    "export_explicit_scaling",
    "export_hf",
    "fold_model",
    "freeze",
    "load_hf",
    "set_gate",
    "start_taper",
    "update_calibration",
    "verify_fold",
]
