"""TaperNorm: gated normalization removal and scale anchoring in pre-norm transformers.

from tapernorm import GPT, GPTConfig, TaperNorm, set_gate, fold_model, load_hf, export_hf
from tapernorm import DyT   # the norm-free alternative (GPTConfig(norm="dyt")); it does not fold

The public names are imported when first used (module __getattr__), so that `import tapernorm.X`
of a module without torch (the workflow's planning, tapernorm.workflow) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_PUBLIC = {
    "ScaleAnchor": "anchor",
    "export_hf": "interop.hf_export",
    "export_explicit_scaling": "fold",
    "fold_model": "fold",
    "verify_fold": "fold",
    "GPT": "model",
    "GPTConfig": "model",
    "DyT": "norms",
    "LayerNorm": "norms",
    "RMSNorm": "norms",
    "TaperNorm": "norms",
    "freeze": "norms",
    "set_gate": "norms",
    "start_taper": "norms",  # the former name of freeze
    "update_calibration": "norms",
}

if TYPE_CHECKING:
    from .anchor import ScaleAnchor
    from .fold import export_explicit_scaling, fold_model, verify_fold
    from .interop.hf_export import export_hf
    from .model import GPT, GPTConfig
    from .norms import (
        DyT,
        LayerNorm,
        RMSNorm,
        TaperNorm,
        freeze,
        set_gate,
        start_taper,
        update_calibration,
    )


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'tapernorm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


def load_hf(model_or_path, taper: str = "none", **kwargs) -> GPT:
    """A Hugging Face GPT-2 / Llama / Mistral / Qwen2 causal LM (object, local dir or hub id) as a
    GPT."""
    from .interop.hf_import import (
        load_hf as _load_hf,  # transformers is imported only when asked for
    )

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
