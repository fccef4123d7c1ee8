"""Offline stand-ins for the paper config's external inputs, in exactly the forms a user supplies
real copies (`tapernorm rehearsal-inputs`; config/rehearsal.yaml), so that the loaders the paper
path uses run end to end on a CPU without the Hub:

| stand-in            | real input                                            | form                      |
|---------------------|-------------------------------------------------------|---------------------------|
| tinystories/        | the `roneneldan/TinyStories` repository               | its V1 and V2 .txt files  |
| openwebtext/        | `Skylion007/openwebtext`                              | .jsonl, a "text" column   |
| pile/               | `apollo-research/monology-pile-uncopyrighted-...`     | `save_to_disk`, input_ids |
| pile_filtered/      | `lucabaroni/apollo-pile-filtered-10k`                 | .parquet, input_ids       |
| gpt2, gpt2-medium,  | the GPT-2 S/M/L/XL weights                            | `save_pretrained` dirs    |
| gpt2-large, gpt2-xl |                                                       | (random weights, shrunk)  |

The texts are the embedded Shakespeare corpus cut into documents (V1 and V2 of TinyStories hold
different plays, so a loader that mixed them would be seen); every number is fixed by `seed`.
Nothing here is a result: the stand-ins only exercise the paper path's code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..runtime.jsonio import dumps, write_json
from .shakespeare import shakespeare_plays
from .tinystories import TINYSTORIES_FILES
from .tokenizers import GPT2_EOT_ID

# GPT-2 S/M/L/XL shrunk for a CPU (the real ones: 12/24/36/48 layers, width 768/1024/1280/1600,
# 1024 positions: the fine-tuning block); the widths keep their order, each stand-in larger than
# the one before
GPT2_STANDINS = {
    "gpt2": {"n_layer": 2, "n_embd": 32, "n_head": 2},
    "gpt2-medium": {"n_layer": 2, "n_embd": 48, "n_head": 2},
    "gpt2-large": {"n_layer": 2, "n_embd": 64, "n_head": 4},
    "gpt2-xl": {"n_layer": 3, "n_embd": 64, "n_head": 4},
}
GPT2_VOCAB, GPT2_POSITIONS = GPT2_EOT_ID + 1, 128  # GPT-2's vocabulary; a block a CPU trains
EVAL_ROWS, EVAL_ROW_TOKENS = 64, 1024  # pre-tokenized rows of the Pile stand-ins, as the real sets'
STORY_LINES, WEB_LINES = 12, 40  # lines per TinyStories-like and per OpenWebText-like document
MARKER = "standins.json"  # written last: what was made, from which seed


def _documents(texts: list[str], lines_per_doc: int) -> list[str]:
    docs = []
    for text in texts:
        lines = text.splitlines(keepends=True)
        for start in range(0, len(lines), lines_per_doc):
            doc = "".join(lines[start : start + lines_per_doc]).strip("\n")
            if doc.strip():
                docs.append(doc)
    return docs


def _write_stories(path: Path, docs: list[str]) -> None:
    """Documents separated by <|endoftext|> lines, as the TinyStories .txt files are."""
    path.write_text("".join(f"{d}\n<|endoftext|>\n" for d in docs), encoding="utf-8")


def _tinystories(out: Path, plays: dict[str, str]) -> dict:
    """V1 gets the odd plays, V2 the even ones; every 20th story of each is its validation split."""
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(plays)
    counts = {}
    for k, (version, files) in enumerate(TINYSTORIES_FILES.items()):
        docs = _documents([plays[n] for n in names[1 - k :: 2]], STORY_LINES)
        splits = {"train": [d for i, d in enumerate(docs) if i % 20], "validation": docs[::20]}
        for split, name in files.items():
            _write_stories(out / name, splits[split])
        counts[version] = {split: len(d) for split, d in splits.items()}
    return counts


def _openwebtext(out: Path, plays: dict[str, str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    docs = _documents([plays[n] for n in sorted(plays)], WEB_LINES)
    lines = (dumps({"text": d}) + "\n" for d in docs)
    (out / "openwebtext.jsonl").write_text("".join(lines), encoding="utf-8")
    return len(docs)


def _token_rows(rng: np.random.Generator) -> list[list[int]]:
    return rng.integers(0, GPT2_EOT_ID, size=(EVAL_ROWS, EVAL_ROW_TOKENS)).tolist()


def _pile(out: Path, rng: np.random.Generator) -> None:
    import datasets

    datasets.Dataset.from_dict({"input_ids": _token_rows(rng)}).save_to_disk(str(out))


def _pile_filtered(out: Path, rng: np.random.Generator) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    table = pa.table({"input_ids": pa.array(_token_rows(rng), type=pa.list_(pa.int64()))})
    pq.write_table(table, out / "train-00000-of-00001.parquet")


def _gpt2(out: Path, shape: dict, seed: int) -> int:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=GPT2_VOCAB, n_positions=GPT2_POSITIONS, **shape)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(str(out), safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def make_standins(out_dir: str | Path, seed: int = 0) -> dict:
    """Write every stand-in under `out_dir` (see the module's table) and `standins.json` last;
    returns what standins.json records."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).unlink(missing_ok=True)
    plays = shakespeare_plays()
    rng = np.random.default_rng(seed)
    record = {
        "seed": seed,
        "note": "offline stand-ins for a rehearsal of the paper path: not the paper's data",
        "tinystories": {"path": "tinystories", "stories": _tinystories(out / "tinystories", plays)},
        "openwebtext": {
            "path": "openwebtext",
            "documents": _openwebtext(out / "openwebtext", plays),
        },
    }
    _pile(out / "pile", rng)
    _pile_filtered(out / "pile_filtered", rng)
    record["pile"] = {"path": "pile", "rows": EVAL_ROWS, "row_tokens": EVAL_ROW_TOKENS}
    record["pile_filtered"] = {"path": "pile_filtered", "rows": EVAL_ROWS}
    record["gpt2"] = {
        name: {"path": name, **shape, "params": _gpt2(out / name, shape, seed + i)}
        for i, (name, shape) in enumerate(GPT2_STANDINS.items())
    }
    write_json(out / MARKER, record)
    return record
