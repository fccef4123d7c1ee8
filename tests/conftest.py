"""Shared fixtures: a small tokenized slice of the embedded Shakespeare corpus."""

import pytest

from tapernorm.data import load_shakespeare, train_sentencepiece, write_shards


@pytest.fixture(scope="session")
def shards_dir(tmp_path_factory):
    """Token shards (SentencePiece, vocab 512) of ~400k characters of Shakespeare."""
    out = tmp_path_factory.mktemp("shards")
    train_docs, val_docs = load_shakespeare()
    train_docs = [d[:20_000] for d in train_docs[:20]]
    val_docs = val_docs[:40]
    tok = train_sentencepiece(train_docs, 512, str(out / "sp"))
    write_shards(train_docs, val_docs, tok, str(out / "data"))
    return out / "data"


def tiny_run(shards_dir, **sections) -> dict:
    """A resolved run config for a fast 2-layer model; `sections` override config sections."""
    from tapernorm.config import resolve_run_config

    cfg = {
        "name": "tiny",
        "data": {"dir": str(shards_dir)},
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32},
        "train": {"steps": 30, "batch_size": 8, "lr": 3e-3, "warmup_steps": 3},
        "taper": {"ema_mu": 0.1},
        "log": {"every": 1, "ckpt_every": 10, "eval_windows": 16},
    }
    for key, value in sections.items():
        if isinstance(value, dict):
            cfg.setdefault(key, {}).update(value)
        else:
            cfg[key] = value
    return resolve_run_config(cfg)
