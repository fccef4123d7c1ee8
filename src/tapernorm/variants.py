"""The one registry of the pre-training variants (Table 1's six and ours) and the fine-tuning
protocols (Sec. 6.4): how each trains, and what each is for. The workflow's families, the
benchmarks, the tables and the figures read their lists from here."""

from __future__ import annotations

from typing import Any

# The one registry of pre-training variants: how each trains, and what it is for. Training:
# (taper, anchor) as in Table 1, and `norm`, `model` (keys it sets) and `against` (the baseline its
# gap is measured against) where they differ from the default. Roles, read by the families, the
# benchmarks, the tables and the figures:
#   paper      a Table 1 variant
#   gap_claim  the claim its paired loss gap against its baseline is judged in (claims 1, 2, dyt)
#   fig2       drawn in figure 2 (the validation curves)
#   bench      timed by the inference benchmarks: `option` names its run to `tapernorm bench`,
#              `columns` are the models it is timed as (Table 3's), `timed` is "always" or
#              "if_trained" (when pretrain.variants has it)
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {
        "taper": "none",
        "anchor": False,
        "label": "Baseline",
        "paper": True,
        "fig2": True,
        "bench": {"option": "baseline", "columns": ("baseline",), "timed": "always"},
    },
    "internal": {"taper": "internal", "anchor": False, "label": "Internal-Taper", "paper": True},
    "internal_aux": {
        "taper": "internal",
        "anchor": True,
        "label": "Internal-Taper (+aux)",
        "paper": True,
        "gap_claim": "1",
        "fig2": True,
        "bench": {"option": "tapered", "columns": ("explicit", "folded"), "timed": "always"},
    },
    "final": {"taper": "final", "anchor": False, "label": "Final-Taper", "paper": True},
    "all": {"taper": "all", "anchor": False, "label": "All-Taper", "paper": True},
    "all_aux": {
        "taper": "all",
        "anchor": True,
        "label": "All-Taper (+aux)",
        "paper": True,
        "gap_claim": "2",
        "fig2": True,
    },
    # not in the paper (docs/norm-free.md): the baseline with an untied head (DyT's recipe has one),
    # which DyT is compared against; TaperNorm on that footing (the LR-grid study); every norm a DyT
    # (Zhu et al. 2025) by its authors' LLaMA recipe (model.DYT_RECIPE: no DyT bias, an untied head,
    # a learnable embedding scalar starting at 1 / the init std 0.02)
    "baseline_untied": {
        "taper": "none",
        "anchor": False,
        "label": "Baseline (untied head)",
        "model": {"tie_embeddings": False},
        "fig2": True,
    },
    "internal_aux_untied": {
        "taper": "internal",
        "anchor": True,
        "label": "Internal-Taper (+aux), untied head",
        "model": {"tie_embeddings": False},
        "against": "baseline_untied",
        "fig2": True,
    },
    "dyt": {
        "taper": "none",
        "anchor": False,
        "label": "DyT",
        "norm": "dyt",
        "model": {"dyt_bias": False, "tie_embeddings": False, "emb_scale": 50.0},
        "against": "baseline_untied",
        "gap_claim": "dyt",
        "fig2": True,
        "bench": {"option": "dyt", "columns": ("dyt",), "timed": "if_trained"},
    },
}


def variants_with(role: str) -> tuple[str, ...]:
    """The variants that have `role` (VARIANTS' roles), in the registry's order."""
    return tuple(name for name, spec in VARIANTS.items() if spec.get(role))


def benched(timed: str) -> tuple[str, ...]:
    """The variants the inference benchmarks time `timed` ("always" or "if_trained")."""
    return tuple(v for v in variants_with("bench") if VARIANTS[v]["bench"]["timed"] == timed)


def bench_columns(timed: str) -> tuple[str, ...]:
    """The models (Table 3's columns) the variants timed `timed` are timed as."""
    return tuple(c for v in benched(timed) for c in VARIANTS[v]["bench"]["columns"])


PAPER_VARIANTS = variants_with("paper")  # Table 1's six


def baseline_of(variant: str) -> str | None:
    """The variant whose runs `variant`'s loss gap is measured against: the baseline with the same
    head (Table 2, the claims); None for a baseline."""
    if VARIANTS[variant]["taper"] == "none" and "norm" not in VARIANTS[variant]:
        return None
    return VARIANTS[variant].get("against", "baseline")


PROTOCOLS: dict[str, dict[str, Any]] = {
    # GPT-2 fine-tuning protocols of Sec. 6.4 (TaperLN always with the fixed-target scale loss)
    "vanilla": {"taper": "none", "anchor": False, "label": "Vanilla"},
    "internal_taperln": {"taper": "internal", "anchor": True, "label": "Internal-TaperLN"},
    "all_taperln": {"taper": "all", "anchor": True, "label": "All-TaperLN"},
    # our rerun of Baroni et al. (2025): norms removed one at a time (fakeln.py)
    "fakeln": {"taper": "none", "anchor": False, "label": "FakeLN", "norm": "fakeln"},
}
