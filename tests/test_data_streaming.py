"""Streamed, multi-process data preparation: the same bytes as the in-memory path, any number of
workers; the held-out split by indices; TinyStories v1/v2 by file; OpenWebText's script refusal;
memory that does not grow with the corpus."""

import hashlib
import itertools
import json
import os
import random
import re
import subprocess
import sys
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tapernorm import cli
from tapernorm import data as D
from tapernorm.cli import data as cli_data
from tapernorm.data import documents, encoding, synthetic
from tapernorm.data import hf_datasets as H
from tapernorm.interop import hub
from tapernorm.workflow import validate_pipeline_config
from tapernorm.workflow.files import finetune_data_config

ROOT = Path(__file__).resolve().parents[1]


def whole_file_documents(path: Path) -> list[str]:
    """The in-memory reading of a .txt copy (before streaming): split the whole text."""
    text = path.read_bytes().decode("utf-8")
    parts = re.split(r"^\s*<\|endoftext\|>\s*$", text, flags=re.MULTILINE)
    return [p.strip("\n") for p in parts if p.strip()]


def in_memory_tokens(docs: list[str], tok) -> bytes:
    """Every document's tokens, EOT after each, as uint16 bytes: what the shards must hold."""
    return np.array(
        [t for d in docs if d for t in (*tok.encode(d), tok.eot_id)], np.uint16
    ).tobytes()


def digests(out: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(out.iterdir())}


@pytest.fixture(scope="module")
def gpt2():
    return D.gpt2_tokenizer()


@pytest.fixture(scope="module")
def stories(tmp_path_factory) -> Path:
    """A TinyStories-like copy: the repository's v2 files (plus v1's and its other files)."""
    root = tmp_path_factory.mktemp("tinystories")
    synthetic.write_tinystories_copy(root, 400_000, 40_000, seed=1, version="v2")
    synthetic.write_tinystories_copy(root, 30_000, 5_000, seed=2, version="v1")
    (root / "data").mkdir()
    (root / "data" / "train-00000-of-00004.parquet").write_bytes(b"not read")
    (root / "TinyStories_all_data.tar.gz").write_bytes(b"not read")
    return root


@pytest.fixture(scope="module")
def web(tmp_path_factory) -> Path:
    """An OpenWebText-like .jsonl copy (with an empty document)."""
    path = tmp_path_factory.mktemp("owt") / "openwebtext.jsonl"
    synthetic.write_jsonl(path, synthetic.openwebtext_like(3), 600_000)
    with open(path, "a") as f:
        f.write('{"text": ""}\n{"text": "the last document"}\n')
    return path


def web_docs(path: Path) -> list[str]:
    return [t for t in (json.loads(line)["text"] for line in path.open()) if t]


# ---- reading ------------------------------------------------------------------------------------


def test_txt_documents_are_the_whole_file_split_whatever_the_blocks(tmp_path):
    pieces = ["<|endoftext|>", "\n", " ", "\t", "a", "b c", "é", "<|endoftext|> x", "\n\n"]
    pieces += ["x <|endoftext|>", "\r\n", "  <|endoftext|>  ", "<|endo", "ftext|>", "\x0b"]
    rng = random.Random(0)
    path = tmp_path / "t.txt"
    for _ in range(3000):
        path.write_bytes("".join(rng.choices(pieces, k=rng.randint(0, 30))).encode())
        expected = whole_file_documents(path)
        for read_bytes in (1, 3, 16, 1 << 20):
            assert list(documents.txt_documents(path, read_bytes)) == expected


def test_txt_documents_name_a_bad_byte_in_a_later_block(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"one\n<|endoftext|>\n" * 50 + b"two\nthr\xffee\n")
    docs = documents.txt_documents(path, read_bytes=64)
    with pytest.raises(
        ValueError, match=rf"{path}: not UTF-8 text .byte 0xff at line 102, column 4"
    ):
        list(docs)


def test_jsonl_texts_are_the_json_loaders(hf_cache, web, tmp_path):
    expected = H.text_column(H._load_files([web]), "text", None)
    assert list(documents.jsonl_texts([web], "text")) == expected == web_docs(web)
    assert list(documents.jsonl_texts([web], "text", max_rows=5)) == expected[:5]
    with pytest.raises(ValueError, match="has no column 'story'"):
        list(documents.jsonl_texts([web], "story"))


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    return datasets


# ---- shards: the same bytes, streamed, with any number of workers -----------------------------


def test_tinystories_shards_are_the_in_memory_ones_for_any_workers(stories, tmp_path):
    train = whole_file_documents(stories / "TinyStoriesV2-GPT4-train.txt")
    val = whole_file_documents(stories / "TinyStoriesV2-GPT4-valid.txt")
    ref = D.train_sentencepiece(train, 600, str(tmp_path / "ref" / "tok"), max_chars=200_000)
    outs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        meta = D.prepare_shards(
            "tinystories",
            str(out),
            vocab_size=600,
            local_path=str(stories),
            tokenizer_chars=200_000,
            workers=workers,
        )
        assert (out / "tokenizer.model").read_bytes() == Path(ref.model_path).read_bytes()
        assert (out / "train.bin").read_bytes() == in_memory_tokens(train, ref)
        assert (out / "val.bin").read_bytes() == in_memory_tokens(val, ref)
        assert (meta["train_docs"], meta["val_docs"]) == (len(train), len(val))
        outs[workers] = digests(out)
    assert outs[1] == outs[2]


def test_openwebtext_split_is_split_documents_streamed(web, gpt2, tmp_path):
    docs = web_docs(web)
    train, val = D.split_documents(docs, D.OWT_TEST_SIZE, D.OWT_SPLIT_SEED)
    outs = {}
    for workers, max_docs in ((1, None), (2, None), (1, 40)):
        out = tmp_path / f"w{workers}-{max_docs}"
        meta = D.prepare_shards(
            "openwebtext",
            str(out),
            tokenizer="gpt2",
            local_path=str(web),
            max_docs=max_docs,
            workers=workers,
        )
        assert (out / "train.bin").read_bytes() == in_memory_tokens(train[:max_docs], gpt2)
        assert (out / "val.bin").read_bytes() == in_memory_tokens(val, gpt2)
        assert meta["corpus"] == "openwebtext" and meta["val_docs"] == len(val) == 1
        assert sorted(os.listdir(out)) == ["meta.json", "train.bin", "val.bin"]  # no temp file
        outs[workers, max_docs] = digests(out)
    assert outs[1, None] == outs[2, None]


def test_held_out_order_is_split_documents_and_hugging_faces(hf_cache):
    docs = [f"doc {i}" for i in range(3001)]
    train, test = D.held_out_order(len(docs), 0.0005, 2357)
    assert len(test) == 2 and sorted([*train, *test]) == list(range(3001))
    assert ([docs[i] for i in train], [docs[i] for i in test]) == D.split_documents(
        docs, 0.0005, 2357
    )
    ref = hf_cache.Dataset.from_dict({"text": docs}).train_test_split(test_size=0.0005, seed=2357)
    assert [docs[i] for i in test] == ref["test"]["text"]


def test_write_split_shards_gathers_any_order_and_cleans_up_on_failure(gpt2, tmp_path, monkeypatch):
    docs = [f"document {i} " * (i % 5 + 1) for i in range(300)] + [""]
    monkeypatch.setattr(D.shards, "GATHER_DOCS", 7)  # many gather chunks
    meta = D.write_split_shards(iter(docs), gpt2, str(tmp_path / "a"), 0.1, 5, max_train_docs=100)
    train, val = D.split_documents([d for d in docs if d], 0.1, 5)
    assert (tmp_path / "a" / "train.bin").read_bytes() == in_memory_tokens(train[:100], gpt2)
    assert (tmp_path / "a" / "val.bin").read_bytes() == in_memory_tokens(val, gpt2)
    assert (meta["train_docs"], meta["val_docs"]) == (100, 30)

    def broken():
        yield from docs[:50]
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        D.write_split_shards(broken(), gpt2, str(tmp_path / "b"), 0.1, 5)
    assert os.listdir(tmp_path / "b") == []  # no temporary token file, no meta.json


def test_a_failing_worker_fails_the_preparation(gpt2, tmp_path):
    class Unencodable:  # the workers rebuild the tokenizer from meta(): it names no tokenizer
        vocab_size, eot_id = 100, 99

        def meta(self):
            return {"kind": "unknown"}

    with pytest.raises(ValueError, match="unknown tokenizer kind"):
        D.write_shards(["a"] * 10, ["b"], Unencodable(), str(tmp_path / "s"), workers=2)
    assert not (tmp_path / "s" / "meta.json").exists()


# ---- memory: bounded by the batches in flight, not the corpus ----------------------------------


def test_ordered_map_keeps_at_most_in_flight_items_ahead():
    pulled, ahead = 0, []

    def items():
        nonlocal pulled
        for i in range(200):
            pulled += 1
            yield i

    with ThreadPoolExecutor(3) as pool:
        for k, result in enumerate(encoding.ordered_map(pool, lambda x: x * x, items(), 4)):
            assert result == k * k
            ahead.append(pulled - k)
    assert max(ahead) <= 4 and len(ahead) == 200


def _peak_traced(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", ["txt", "jsonl"])
def test_peak_memory_does_not_grow_with_the_corpus(kind, gpt2, tmp_path, monkeypatch):
    """Python's allocations (the documents, their tokens) peak at the same size for a corpus four
    times larger, far below its size: nothing holds the corpus (a str of it alone would take its
    size; tracemalloc traces numpy's arrays too; the tokenizer is built before)."""
    monkeypatch.setattr(documents, "READ_BYTES", 1 << 16)
    monkeypatch.setattr(documents, "JSONL_BLOCK_BYTES", 1 << 16)
    monkeypatch.setattr(encoding, "BATCH_CHARS", 1 << 16)
    peaks = {}
    for mb in (1, 4):
        corpus = tmp_path / f"{mb}"
        corpus.mkdir()
        if kind == "txt":
            synthetic.write_tinystories_copy(corpus, mb * 10**6, 20_000, seed=mb)
            args = {"corpus": "tinystories"}
        else:
            synthetic.write_jsonl(corpus / "c.jsonl", synthetic.openwebtext_like(mb), mb * 10**6)
            args = {"corpus": "openwebtext"}
        kwargs = dict(args, out_dir=str(tmp_path / f"out{mb}"), local_path=str(corpus))
        peaks[mb] = _peak_traced(
            lambda kwargs=kwargs: D.prepare_shards(**kwargs, tokenizer="gpt2", workers=1)
        )
    assert peaks[4] < 1.3 * peaks[1] + 200_000, peaks
    assert peaks[4] < 4 * 10**6 / 3, peaks


def test_sentencepiece_training_reads_only_its_characters(tmp_path):
    read = 0

    def docs():
        nonlocal read
        for i in itertools.count():
            read += 1
            yield f"story {i} about a cat\nand a dog {i % 7}\n"

    tok = D.train_sentencepiece(docs(), 300, str(tmp_path / "t"), max_chars=20_000)
    assert tok.vocab_size == 300 and read < 20_000 / 20  # an endless corpus, a bounded read


def test_a_corpus_error_during_tokenizer_training_is_raised_as_is(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"a story\n<|endoftext|>\n" * 500 + b"bad \xff\n")
    with pytest.raises(ValueError, match=r"c\.txt: not UTF-8 text .byte 0xff at line 1001"):
        D.train_sentencepiece(documents.txt_documents(path, 256), 300, str(tmp_path / "t"))


# ---- TinyStories: one version, by its files -----------------------------------------------------


def test_tinystories_reads_only_the_chosen_version(stories):
    for version in ("v1", "v2"):
        files = D.tinystories_files(version, str(stories))
        names = {split: f.name for split, f in files.items()}
        assert names == D.TINYSTORIES_FILES[version]
        train, val = D.load_corpus("tinystories", str(stories), tinystories=version)
        assert train == whole_file_documents(files["train"])
        assert val == whole_file_documents(files["validation"])
    v1 = set(D.load_corpus("tinystories", str(stories), tinystories="v1")[0])
    v2 = set(D.load_corpus("tinystories", str(stories), tinystories="v2")[0])
    assert v1 and v2 and not v1 & v2


def test_tinystories_copies_that_do_not_say_their_version_are_refused(stories, tmp_path):
    only_v1 = tmp_path / "v1"
    only_v1.mkdir()
    for name in D.TINYSTORIES_FILES["v1"].values():
        (only_v1 / name).write_bytes((stories / name).read_bytes())
    with pytest.raises(ValueError, match="holds TinyStories v1 .* set data.tinystories: v1"):
        D.tinystories_files("v2", str(only_v1))
    assert D.tinystories_files("v1", str(only_v1))["train"].parent == only_v1

    unnamed = tmp_path / "unnamed"
    unnamed.mkdir()
    (unnamed / "train.jsonl").write_text('{"text": "a story"}\n')
    (unnamed / "validation.jsonl").write_text('{"text": "another"}\n')
    with pytest.raises(ValueError, match="cannot tell which TinyStories version") as info:
        D.prepare_shards("tinystories", str(tmp_path / "o"), local_path=str(unnamed))
    assert "TinyStoriesV2-GPT4-train.txt" in str(info.value)
    assert "snapshot_download" in str(info.value)

    half = tmp_path / "half"
    half.mkdir()
    (half / "TinyStoriesV2-GPT4-train.txt").write_text("a\n")
    with pytest.raises(ValueError, match="lacks TinyStoriesV2-GPT4-valid.txt"):
        D.tinystories_files("v2", str(half))
    (half / "sub").mkdir()
    (half / "sub" / "TinyStoriesV2-GPT4-train.txt").write_text("b\n")
    with pytest.raises(ValueError, match="files twice"):
        D.tinystories_files("v2", str(half))
    with pytest.raises(ValueError, match="not a file"):
        D.tinystories_files("v2", str(stories / "TinyStoriesV2-GPT4-train.txt"))
    with pytest.raises(ValueError, match="unknown TinyStories version"):
        D.tinystories_files("v3", str(stories))


def test_tinystories_from_the_hub_downloads_the_versions_files(monkeypatch, tmp_path):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    pytest.importorskip("datasets")
    asked = []

    def download(repo, filename, repo_type, local_files_only):
        asked.append((repo, filename, repo_type))
        (tmp_path / filename).write_text("a story\n")
        return str(tmp_path / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: True)
    files = D.tinystories_files("v2")
    assert asked == [("roneneldan/TinyStories", n, "dataset") for n in files_of("v2")]
    assert files["train"] == tmp_path / "TinyStoriesV2-GPT4-train.txt"

    def offline(repo, filename, repo_type, local_files_only):
        raise huggingface_hub.errors.LocalEntryNotFoundError("not in the cache")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(D.DataUnavailableError) as info:
        D.tinystories_files("v1")
    recipe = re.search(r"^    (python -c .*)$", str(info.value), re.M)[1]
    code = re.fullmatch(r'python -c "(.*)"', recipe)[1]
    compile(code, "recipe", "exec")
    assert all(name in code for name in files_of("v1")) and "data.local_path" in str(info.value)


def files_of(version: str) -> list[str]:
    return list(D.TINYSTORIES_FILES[version].values())


# ---- OpenWebText: a pinned parquet revision; a refused script is DataUnavailableError ----------

SCRIPT_REFUSED = "Dataset scripts are no longer supported, but found openwebtext.py"


def test_openwebtext_from_the_hub_is_the_parquet_revision_streamed(hf_cache, monkeypatch):
    calls = []

    def load_dataset(name, split=None, revision=None, streaming=False):
        calls.append((name, split, revision, streaming))
        return hf_cache.Dataset.from_dict({"text": ["one", "", "two"]})

    monkeypatch.setattr(hf_cache, "load_dataset", load_dataset)
    monkeypatch.setattr(hub, "offline", lambda *flags: False)
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: True)
    source = D.corpus_source("openwebtext")
    assert list(source.train()) == ["one", "two"] and source.val is None
    assert calls == [("Skylion007/openwebtext", "train", D.OWT_REVISION, True)]


def test_a_refused_loading_script_is_data_unavailable_with_a_recipe(
    hf_cache, monkeypatch, capsys, tmp_path
):
    def refuse(*args, **kwargs):
        raise RuntimeError(SCRIPT_REFUSED)

    monkeypatch.setattr(hf_cache, "load_dataset", refuse)
    monkeypatch.setattr(hub, "offline", lambda *flags: False)
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: True)
    with pytest.raises(D.DataUnavailableError) as info:
        D.load_hf_text("Skylion007/openwebtext", "train", revision=D.OWT_REVISION)
    message = str(info.value)
    assert "loading-script dataset" in message and SCRIPT_REFUSED in message
    assert f"revision='{D.OWT_REVISION}'" in message and "save_to_disk('PATH')" in message
    assert "trust_remote_code" not in message  # (the pinned revision needs no script)
    with pytest.raises(D.DataUnavailableError, match="loading-script") as info:
        D.load_hf_dataset("some/script-dataset", "train")
    assert "pip install 'datasets<4'" in str(info.value)
    assert "load_dataset('some/script-dataset', trust_remote_code=True)" in str(info.value)
    argv = ["prepare-data", "--corpus", "openwebtext", "--tokenizer", "gpt2", "--workers", "1"]
    status = cli.main([*argv, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "loading-script dataset" in err[0]
    assert not (tmp_path / "o" / "meta.json").exists()


def test_the_recipe_makes_a_copy_prepare_data_reads(hf_cache, web, gpt2, tmp_path):
    """The recipe's own code, run offline on a directory laid out as the parquet revision is
    (data/train-*.parquet) in place of the Hub repository: its save_to_disk copy gives the same
    shards as the documents themselves."""
    repo = tmp_path / "repo" / "data"
    repo.mkdir(parents=True)
    ds = hf_cache.Dataset.from_dict({"text": web_docs(web)})
    half = len(ds) // 2
    ds.select(range(half)).to_parquet(repo / "train-00000-of-00002.parquet")
    ds.select(range(half, len(ds))).to_parquet(repo / "train-00001-of-00002.parquet")
    message = H._unavailable_message(
        "Skylion007/openwebtext", "train", RuntimeError(SCRIPT_REFUSED), revision=D.OWT_REVISION
    )
    code = re.search(r'python -c "(.*)"', message)[1]
    code = code.replace("'Skylion007/openwebtext'", repr(str(repo.parent)))
    code = code.replace(f", revision='{D.OWT_REVISION}'", "")  # (a local directory has none)
    copy = tmp_path / "copy"
    code = code.replace("'PATH'", repr(str(copy)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "c")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    out = tmp_path / "shards"
    D.prepare_shards("openwebtext", str(out), tokenizer="gpt2", local_path=str(copy), workers=1)
    train, val = D.split_documents(web_docs(web), D.OWT_TEST_SIZE, D.OWT_SPLIT_SEED)
    assert (out / "train.bin").read_bytes() == in_memory_tokens(train, gpt2)
    assert (out / "val.bin").read_bytes() == in_memory_tokens(val, gpt2)
    parquet = tmp_path / "from-parquet"
    D.prepare_shards("openwebtext", str(parquet), tokenizer="gpt2", local_path=str(repo), workers=1)
    assert digests(parquet) == digests(out)


# ---- the command line and the workflow's arguments ---------------------------------------------


def test_prepare_data_arguments_name_the_tinystories_version_and_workers():
    cfg = validate_pipeline_config(
        __import__("yaml").safe_load((ROOT / "config" / "paper.yaml").read_text()),
        str(ROOT / "workflow" / "schemas" / "config.schema.yaml"),
    )

    def prepare_data(section: dict, *keys: str) -> tuple:
        """`keys` of what `tapernorm prepare-data --config-json SECTION` (a data rule's command)
        prepares."""
        argv = ["prepare-data", "--config-json", json.dumps(section), "--out", "o"]
        settings = cli_data.data_settings(cli.build_parser().parse_args(argv))
        return tuple(settings[k] for k in keys)

    assert cfg["data"]["tinystories"] == "v2"
    pretrain = prepare_data(cfg["data"], "corpus", "tokenizer", "vocab_size", "tinystories")
    assert pretrain == ("tinystories", "sentencepiece", 10_000, "v2")
    cfg["finetune"]["data"].update(corpus="tinystories", tinystories="v1")
    finetune = prepare_data(finetune_data_config(cfg), "corpus", "tokenizer", "tinystories")
    assert finetune == ("tinystories", "gpt2", "v1")
    args = cli.build_parser().parse_args(["prepare-data", "--corpus", "tinystories", "--out", "o"])
    settings = cli_data.data_settings(args)
    assert (args.tinystories, settings["tinystories"], args.workers) == (None, "v2", None)
    for rule in ("data.smk", "finetune.smk"):
        assert "--workers {threads}" in (ROOT / "workflow" / "rules" / rule).read_text()


def test_workers_default_to_the_cpus_this_process_may_use(monkeypatch):
    if hasattr(os, "sched_getaffinity"):
        assert D.available_cpus() == len(os.sched_getaffinity(0))
    seen = []
    monkeypatch.setattr(D.prepare, "write_shards", lambda *a, **k: seen.append(k["workers"]))
    monkeypatch.setattr(D.prepare, "train_sentencepiece", lambda *a, **k: None)
    monkeypatch.setattr(D.prepare, "available_cpus", lambda: 7)
    D.prepare_shards("shakespeare", "unused")
    assert seen == [7]


def test_threads_do_not_change_the_bytes_of_the_cli(tmp_path, capsys):
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / workers
        argv = ["prepare-data", "--corpus", "shakespeare", "--vocab-size", "320"]
        assert cli.main([*argv, "--no-byte-fallback", "--workers", workers, "--out", str(out)]) == 0
        outs.append(digests(out))
    capsys.readouterr()
    assert outs[0] == outs[1] and set(outs[0]) >= {"tokenizer.model", "train.bin", "val.bin"}


def test_synthetic_corpora_are_reproducible_from_their_seed(tmp_path):
    for seed in (0, 1):
        synthetic.write_tinystories_copy(tmp_path / f"ts{seed}", 20_000, 2_000, seed=seed)
        synthetic.write_jsonl(tmp_path / f"w{seed}.jsonl", synthetic.openwebtext_like(seed), 20_000)
    same = [digests(tmp_path / "ts0"), (tmp_path / "w0.jsonl").read_bytes()]
    assert same != [digests(tmp_path / "ts1"), (tmp_path / "w1.jsonl").read_bytes()]
    synthetic.write_tinystories_copy(tmp_path / "again", 20_000, 2_000, seed=0)
    assert digests(tmp_path / "again") == same[0]
    stories = whole_file_documents(tmp_path / "ts0" / "TinyStoriesV2-GPT4-train.txt")
    assert len(stories) > 10 and all("<|endoftext|>" not in s for s in stories)
