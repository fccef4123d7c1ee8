"""Atomic writes (tapernorm.runtime.atomic): file modes follow the umask, failures leave nothing behind;
checkpoint.replace_dir."""

import os
import stat

import numpy as np
import pytest
import torch

from tapernorm.data import gpt2_tokenizer, write_eval_set, write_shards
from tapernorm.runtime.atomic import atomic_open, atomic_path, atomic_write_bytes
from tapernorm.training.checkpoint import load_tensors, replace_dir, save_tensors, write_json


@pytest.fixture
def umask():
    """Set the process umask for one test; the old one is restored after it."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_mode_follows_umask(tmp_path, umask, mask, mode):
    umask(mask)
    atomic_write_bytes(tmp_path / "a.bin", b"x")
    with atomic_open(tmp_path / "b.bin") as f:
        f.write(b"y")
    save_tensors(tmp_path / "c.safetensors", {"w": torch.ones(2)})
    write_json(tmp_path / "d.json", {"k": 1})
    write_eval_set(np.ones((2, 3)), 10, str(tmp_path / "ev"), {})
    write_shards(["a b"], ["c"], gpt2_tokenizer(), str(tmp_path / "sh"))
    written = ["a.bin", "b.bin", "c.safetensors", "d.json", "ev/rows.bin", "ev/meta.json"]
    written += ["sh/train.bin", "sh/val.bin", "sh/meta.json"]
    assert {p: _mode(tmp_path / p) for p in written} == dict.fromkeys(written, mode)
    with open(tmp_path / "plain", "w"):
        pass
    assert _mode(tmp_path / "plain") == mode  # what a plain open gives


def test_replaces_existing_file(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"old content")
    inode = os.stat(path).st_ino
    with atomic_open(path) as f:
        f.write(b"new")
        assert path.read_bytes() == b"old content"  # untouched until the block ends
    assert path.read_bytes() == b"new"
    assert os.stat(path).st_ino != inode  # renamed into place, not rewritten
    assert os.listdir(tmp_path) == ["f.txt"]


@pytest.mark.parametrize("existing", [False, True])
def test_failure_leaves_no_partial_file_and_no_temp(tmp_path, existing):
    path = tmp_path / "f.bin"
    if existing:
        path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk gone"), atomic_open(path) as f:
        f.write(b"partial")
        raise RuntimeError("disk gone")
    assert os.listdir(tmp_path) == (["f.bin"] if existing else [])
    if existing:
        assert path.read_bytes() == b"old"


def test_failure_of_a_writer_by_name(tmp_path):
    path = tmp_path / "sub" / "t.safetensors"
    with pytest.raises(ValueError), atomic_path(path) as tmp:
        assert tmp.parent == path.parent and tmp.name.startswith(".t.safetensors.")
        tmp.write_bytes(b"half")
        raise ValueError("writer failed")
    assert os.listdir(tmp_path / "sub") == []
    save_tensors(path, {"w": torch.arange(3.0)})
    assert torch.equal(load_tensors(path)["w"], torch.arange(3.0))
    assert os.listdir(tmp_path / "sub") == ["t.safetensors"]


def test_replace_dir(tmp_path):
    final, tmp = tmp_path / "ckpt", tmp_path / "ckpt.tmp"
    for content in ("one", "two"):
        tmp.mkdir()
        (tmp / "x").write_text(content)
        replace_dir(tmp, final)
        assert (final / "x").read_text() == content
        assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_replace_dir_failure_keeps_the_old_directory(tmp_path):
    final = tmp_path / "ckpt"
    final.mkdir()
    (final / "x").write_text("old")
    with pytest.raises(FileNotFoundError):
        replace_dir(tmp_path / "never-written", final)
    assert (final / "x").read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
