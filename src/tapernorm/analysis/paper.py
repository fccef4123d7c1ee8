"""The paper's published numbers (arXiv 2602.10408), as data, each with the version of the paper and
the table or figure it is from (`Source`: v1, Feb 2026, has the tables and figures; v2, May 2026,
replaces the throughput benchmark by a KV-cached decoding benchmark whose headline alone is known).

They appear in our tables, figures and claims only as clearly labelled reference values; `SOURCES`
names the source of every number here (tests check that none is left out), and `Source.tag` is
what a rendered paper value carries ("paper v1, Table 2").
"""

from __future__ import annotations

from dataclasses import dataclass

ARXIV = "arXiv 2602.10408"
V1, V2 = "v1", "v2"  # Feb 2026 (tables, figures, throughput benchmark); May 2026 (decode headline)
VERSIONS = (V1, V2)


@dataclass(frozen=True)
class Source:
    """Where a paper number is from: the paper's version and the table or figure ('' where it is
    the paper's text: we do not cite its section numbers)."""

    version: str
    where: str = ""

    def __post_init__(self) -> None:
        if self.version not in VERSIONS:
            raise ValueError(f"paper version {self.version!r}: not one of {', '.join(VERSIONS)}")

    def __str__(self) -> str:
        return f"{ARXIV} {self.version}" + (f", {self.where}" if self.where else "")

    @property
    def tag(self) -> str:
        """What a rendered paper value carries: 'paper v1, Table 2' ('paper v1': its text)."""
        return f"paper {self.version}" + (f", {self.where}" if self.where else "")

    def to_dict(self) -> dict:
        return {"paper": ARXIV, "version": self.version, "where": self.where}


def tagged(text: str, *sources: Source) -> str:
    """`text` with the version and place of each of its sources: '+1.46% (paper v1, Table 2)'."""
    return f"{text} ({tags(*sources)})" if sources else text


def tags(*sources: Source) -> str:
    """'paper v1, Table 3; paper v2, decode headline' (each source once, in order)."""
    return "; ".join(dict.fromkeys(s.tag for s in sources))


SOURCE = ARXIV  # the paper (each number's version: SOURCES)

# The scale of the paper's pre-training (Sec. 6.1, Table 5), for the scale card (scale_card.py).
# Tokens per parameter: 500k steps x 16 x 512 = 4.1B tokens over ~1M parameters (d=64) is ~4,000;
# 1M steps x 8,192 = 8.2B over ~30M (d=512) is ~270.
SCALE_SOURCE = Source(V1)  # v1's text on its TinyStories setup (its steps: TABLE5_SOURCE)
CORPUS = "TinyStories"
TOKENIZER = "SentencePiece, vocabulary 10k"
MODEL = "d=64-512, L=8, 16 heads, T=512: 1M-30M parameters"
TRAINING = "0.5M-1M steps x 16 x 512 = 4.1-8.2B tokens per run: ~270-4,000 tokens per parameter"
# passes over the training split: the paper gives its tokens per run (random 512-token windows of
# TinyStories) but not the size of its tokenized training split, so not its passes
PASSES = "not stated"
PASSES_WHY = "4.1-8.2B tokens per run as random windows of TinyStories, whose size in tokens it does not give"
LR = "3e-4 (AdamW, 5% warmup, cosine)"
FINETUNE_SOURCE = Source(V1, "Table 6")  # (with v1's text on the GPT-2 models)
FINETUNE = "GPT-2 S-XL (124M-1.5B parameters) from the hub, 300-800 steps of ~2^19 tokens"

# The stability claim (claims.stability): v1's title ("... Enables Stable Training ...") and text.
STABILITY_SOURCE = Source(V1, "title")  # (and its text)

# model size label of each width (section 6.1: L=8, widths 64/128/256/512 -> 1M/3M/9M/30M parameters)
SIZE_BY_WIDTH = {64: "1M", 128: "3M", 256: "9M", 512: "30M"}
PARAMS_BY_WIDTH = {64: 1e6, 128: 3e6, 256: 9e6, 512: 30e6}  # the same labels as numbers


@dataclass(frozen=True)
class PaperCell:
    """One cell of Table 2: mean ± std of the validation loss over seeds, gap to the baseline."""

    mean: float
    std: float
    gap_pct: float | None  # relative gap to the baseline of the same size; None for the baseline
    seeds: int = 6
    dagger: bool = False  # 5 seeds: one outlier with unusually high validation loss excluded
    source: Source = Source(V1, "Table 2")

    def text(self) -> str:
        s = f"{self.mean:.4f} ± {self.std:.4f}" + (" †" if self.dagger else "")
        return s if self.gap_pct is None else f"{s} ({self.gap_pct:+.2f}%)"


# Table 2: TinyStories validation loss at g=0, mean ± std over 6 seeds (†: 5 seeds), by width.
TABLE2_SOURCE = Source(V1, "Table 2")
TABLE2: dict[tuple[int, str], PaperCell] = {
    (64, "baseline"): PaperCell(2.1538, 0.0025, None),
    (64, "internal_aux"): PaperCell(2.1852, 0.0040, 1.46),
    (64, "all_aux"): PaperCell(2.1930, 0.0035, 1.82),
    (128, "baseline"): PaperCell(1.7561, 0.0010, None),
    (128, "internal_aux"): PaperCell(1.7828, 0.0029, 1.52),
    (128, "all_aux"): PaperCell(1.7874, 0.0028, 1.78),
    (256, "baseline"): PaperCell(1.4620, 0.0022, None),
    (256, "internal_aux"): PaperCell(1.4837, 0.0016, 1.48),
    (256, "all_aux"): PaperCell(1.4837, 0.0023, 1.48, seeds=5, dagger=True),
    (512, "baseline"): PaperCell(1.2768, 0.0018, None),
    (512, "internal_aux"): PaperCell(1.2859, 0.0010, 0.71),
    (512, "all_aux"): PaperCell(1.2868, 0.0041, 0.78),
}

# Table 5: pre-training steps by width; 6 seeds each, batch 16 x 512 tokens, linear warmup over 5%.
TABLE5_SOURCE = Source(V1, "Table 5")
TABLE5_STEPS = {64: 500_000, 128: 500_000, 256: 750_000, 512: 1_000_000}
TABLE5_SEEDS = 6
TABLE5_BATCH = 16
TABLE5_BLOCK = 512
TABLE5_WARMUP_FRAC = 0.05

# Figure 2 (d=512): final training loss, Internal-Taper (+aux) vs Baseline.
FIG2_SOURCE = Source(V1, "Fig. 2 (d=512, TinyStories)")
FIG2_FINAL_LOSS = {"internal_aux": 1.22, "baseline": 1.20}

# Figure 3 (d=512): end-of-training mean logit L2 norm; the curves split at ~30-40% of training.
FIG3_SOURCE = Source(V1, "Fig. 3 (d=512, TinyStories)")
FIG3_END_LOGIT_NORM = {"all": 2e5, "final": 1.2e5}
FIG3_ANCHORED_RANGE = (5e3, 6e3)  # baseline, Internal-Taper, both (+aux)
FIG3_SPLIT_PROGRESS = (0.3, 0.4)
FIG3_CHASING_RATIO = (20, 40)  # unanchored / anchored, as read from the figure

# Figure 4 (d=512): without an anchor, no-final-norm gradient norms decay toward ~0.005-0.01.
FIG4_SOURCE = Source(V1, "Fig. 4 (d=512, TinyStories)")
FIG4_NO_FINAL_NORM_GRAD = (0.005, 0.01)

# Section 4 / 6.1: folded and unfolded logits agree to ~1e-5 relative to the logit scale (float32).
FOLD_SOURCE = Source(V1)  # v1's text on folding
FOLD_RTOL = 1e-5

# Section 6.4, Table 4: GPT-2 fine-tuning, mean CE on OpenWebText (held-out), The Pile and
# Pile-filtered, by model and protocol. FakeLN: published numbers of Baroni et al. (2025), not rerun.
TABLE4_SOURCE = Source(V1, "Table 4")
GPT2_MODELS = {
    "gpt2": "GPT-2 S",
    "gpt2-medium": "GPT-2 M",
    "gpt2-large": "GPT-2 L",
    "gpt2-xl": "GPT-2 XL",
}
TABLE4_SETS = ("owt", "pile", "pile_filtered")
TABLE4_PROTOCOLS = ("vanilla", "fakeln", "internal_taperln", "all_taperln")
TABLE4: dict[tuple[str, str], tuple[float, float, float]] = {
    ("gpt2", "vanilla"): (3.0126, 2.8511, 2.8112),
    ("gpt2", "fakeln"): (3.0797, 2.8852, 2.8757),
    ("gpt2", "internal_taperln"): (3.0584, 2.8381, 2.8374),
    ("gpt2", "all_taperln"): (3.0685, 2.8326, 2.8416),
    ("gpt2-medium", "vanilla"): (2.7390, 2.5752, 2.5724),
    ("gpt2-medium", "fakeln"): (2.7642, 2.6579, 2.6352),
    ("gpt2-medium", "internal_taperln"): (2.7550, 2.5937, 2.5936),
    ("gpt2-medium", "all_taperln"): (2.7715, 2.6248, 2.6191),
    ("gpt2-large", "vanilla"): (2.6240, 2.6233, 2.5074),
    ("gpt2-large", "fakeln"): (2.6384, 2.7504, 2.5159),
    ("gpt2-large", "internal_taperln"): (2.6277, 2.7860, 2.4910),
    ("gpt2-large", "all_taperln"): (2.6230, 2.6539, 2.4814),
    ("gpt2-xl", "vanilla"): (2.4799, 2.4673, 2.3821),
    ("gpt2-xl", "fakeln"): (2.5052, 130.2197, 2.3992),  # Pile: dominated by outlier sequences
    ("gpt2-xl", "internal_taperln"): (2.5144, 2.5303, 2.3844),
    ("gpt2-xl", "all_taperln"): (2.5305, 2.6504, 2.4000),
}
TABLE4_OUTLIERS = {("gpt2-xl", "fakeln", "pile")}  # the paper marks this cell outlier-dominated


@dataclass(frozen=True)
class FinetuneSchedule:
    """One row of Table 6 (steps) with the model's optimizer settings (Sec. 6.4, Baroni et al.)."""

    steps: int
    warmup_end: int
    taper_start: int
    taper_end: int
    lr: float
    min_lr: float
    lam: float


# Table 6: total / warmup end / taper start / taper end; LR (min LR) and lambda from Sec. 6.4.
# All: AdamW (0.9, 0.999), weight decay 0.01, clip 1.0, bf16, EMA mu 0.1, ~2^19 tokens per step.
TABLE6_SOURCE = Source(V1, "Table 6 and Sec. 6.4")
TABLE6: dict[str, FinetuneSchedule] = {
    "gpt2": FinetuneSchedule(300, 25, 25, 100, 6e-4, 3e-4, 0.1),
    "gpt2-medium": FinetuneSchedule(500, 10, 20, 200, 6e-4, 3e-4, 0.1),
    "gpt2-large": FinetuneSchedule(600, 30, 30, 500, 3e-4, 4e-5, 0.1),
    "gpt2-xl": FinetuneSchedule(800, 20, 50, 700, 1e-4, 2e-5, 0.01),
}
FINETUNE_TOKENS_PER_STEP = 2**19
FINETUNE_EMA_MU = 0.1
FINETUNE_BETAS = (0.9, 0.999)
FINETUNE_WEIGHT_DECAY = 0.01


def size_label(width: int) -> str:
    """The paper's size label of a width ("1M" for 64), or "—" for widths the paper doesn't have."""
    return SIZE_BY_WIDTH.get(int(width), "—")


def table2_text(width: int, variant: str) -> str:
    """The paper's Table 2 cell formatted like the paper, or "—" where the paper has no number."""
    cell = TABLE2.get((int(width), variant))
    return cell.text() if cell else "—"


# Table 3 (v1 inference benchmark): forward throughput in k tokens/s (last-token logits, no KV cache) of
# Internal-Taper (+aux) at d=512 (30M) on one H100 80GB, bf16, TF32 on, CUDA events, 10 warmup + 50 timed
# iterations; speedups over the RMSNorm baseline as printed.
TABLE3_SOURCE = Source(V1, "Table 3")
TABLE3_SETUP = "one H100 80GB, bf16, TF32, d=512 (30M), 10 warmup + 50 timed iterations"
TABLE3: dict[tuple[int, int], dict[str, tuple[float, float]]] = {  # (B, T) -> variant: (k tok/s, x)
    (1, 128): {"baseline": (40.7, 1.0), "explicit": (45.9, 1.13), "folded": (48.7, 1.20)},
    (1, 256): {"baseline": (79.3, 1.0), "explicit": (90.8, 1.14), "folded": (96.8, 1.22)},
    (1, 512): {"baseline": (163.2, 1.0), "explicit": (181.7, 1.11), "folded": (195.5, 1.20)},
    (4, 128): {"baseline": (149.3, 1.0), "explicit": (169.3, 1.13), "folded": (180.4, 1.21)},
    (4, 256): {"baseline": (290.5, 1.0), "explicit": (323.6, 1.11), "folded": (344.9, 1.19)},
    (4, 512): {"baseline": (546.3, 1.0), "explicit": (588.1, 1.08), "folded": (615.9, 1.13)},
}

# The v2 decode benchmark (KV-cached greedy decoding): only the headline is known.
DECODE_SOURCE = Source(V2, "decode headline")
DECODE_SPEEDUP = {"explicit": 1.14, "folded": 1.18}  # "up to", over the RMSNorm baseline


def table3_text(batch: int, seq_len: int, variant: str) -> str:
    """The paper's Table 3 cell ("45.9 (1.13×)"), or "—" where the paper has no number."""
    cell = TABLE3.get((int(batch), int(seq_len)))
    if cell is None:
        return "—"
    tok_s, speedup = cell[variant]
    return f"{tok_s:.1f}" if variant == "baseline" else f"{tok_s:.1f} ({speedup:.2f}×)"


def table3_best() -> dict[str, float]:
    """The largest speedup of each export in Table 3 (1.14 explicit, 1.22 folded)."""
    return {v: max(cell[v][1] for cell in TABLE3.values()) for v in ("explicit", "folded")}


# The source of every number above, by the name of the constant that holds it (paper_test: none left
# out); a Table 2 cell also carries its own (PaperCell.source).
SOURCES: dict[str, Source] = {
    **dict.fromkeys(("CORPUS", "TOKENIZER", "MODEL", "LR"), SCALE_SOURCE),
    **dict.fromkeys(("TRAINING", "PASSES", "PASSES_WHY"), TABLE5_SOURCE),
    **dict.fromkeys(("SIZE_BY_WIDTH", "PARAMS_BY_WIDTH"), SCALE_SOURCE),
    "TABLE2": TABLE2_SOURCE,
    **dict.fromkeys(
        ("TABLE5_STEPS", "TABLE5_SEEDS", "TABLE5_BATCH", "TABLE5_BLOCK", "TABLE5_WARMUP_FRAC"),
        TABLE5_SOURCE,
    ),
    "FIG2_FINAL_LOSS": FIG2_SOURCE,
    **dict.fromkeys(
        ("FIG3_END_LOGIT_NORM", "FIG3_ANCHORED_RANGE", "FIG3_SPLIT_PROGRESS", "FIG3_CHASING_RATIO"),
        FIG3_SOURCE,
    ),
    "FIG4_NO_FINAL_NORM_GRAD": FIG4_SOURCE,
    "FOLD_RTOL": FOLD_SOURCE,
    "FINETUNE": FINETUNE_SOURCE,
    **dict.fromkeys(
        ("GPT2_MODELS", "TABLE4", "TABLE4_SETS", "TABLE4_PROTOCOLS", "TABLE4_OUTLIERS"),
        TABLE4_SOURCE,
    ),
    **dict.fromkeys(
        (
            "TABLE6",
            "FINETUNE_TOKENS_PER_STEP",
            "FINETUNE_EMA_MU",
            "FINETUNE_BETAS",
            "FINETUNE_WEIGHT_DECAY",
        ),
        TABLE6_SOURCE,
    ),  # fmt: skip
    **dict.fromkeys(("TABLE3", "TABLE3_SETUP"), TABLE3_SOURCE),
    "DECODE_SPEEDUP": DECODE_SOURCE,
}


def source_of(name: str) -> Source:
    """The source of the paper number held by constant `name` (KeyError names it if none)."""
    if name not in SOURCES:
        raise KeyError(f"paper number {name!r} has no source (paper.SOURCES)")
    return SOURCES[name]


def table2_gap(width: int, variant: str) -> tuple[float, Source] | None:
    """The paper's gap of `variant` to the baseline at `width` (%, Table 2) with its source, or
    None where the paper has none (another width, the baseline, a variant beyond Table 2)."""
    cell = TABLE2.get((int(width), variant))
    if cell is None or cell.gap_pct is None:
        return None
    return cell.gap_pct, cell.source


def tokens_per_param(width: int) -> float | None:
    """The paper's training tokens per parameter at `width` (Table 5's steps x 16 x 512 over the
    size label's parameters), or None at a width the paper doesn't have."""
    if int(width) not in TABLE5_STEPS:
        return None
    tokens = TABLE5_STEPS[int(width)] * TABLE5_BATCH * TABLE5_BLOCK
    return tokens / PARAMS_BY_WIDTH[int(width)]
