"""Provenance: the commit and dirtiness of a work tree, config hashes, stamps, and what a run's
config.json records of what made it."""

import json
import subprocess

import pytest
from conftest import tiny_run

from tapernorm import provenance
from tapernorm.train import train


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "a.txt").write_text("a\n")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-q", "-m", "a")
    return tmp_path


def test_git_state_names_the_commit_and_a_dirty_tree(repo):
    clean = provenance.git_state(repo)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False
    (repo / "a.txt").write_text("changed\n")
    assert provenance.git_state(repo) == {"commit": clean["commit"], "dirty": True}
    (repo / "a.txt").write_text("a\n")
    (repo / "new.py").write_text("")  # an untracked file changes the code too
    assert provenance.git_state(repo)["dirty"] is True


def test_outside_a_work_tree_the_commit_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("TAPERNORM_COMMIT", raising=False)
    assert provenance.git_state(tmp_path) == {"commit": "unknown", "dirty": None}
    monkeypatch.setenv("TAPERNORM_COMMIT", "abc123")
    assert provenance.git_state(tmp_path)["commit"] == "abc123"


def test_config_hash_ignores_key_order_and_sees_every_value():
    a = {"pretrain": {"seeds": 3, "steps": 600}, "bench": None}
    assert provenance.config_hash(a) == provenance.config_hash(
        {"bench": None, "pretrain": {"steps": 600, "seeds": 3}}
    )
    assert provenance.config_hash(a) != provenance.config_hash(
        {"pretrain": {"seeds": 3, "steps": 601}, "bench": None}
    )


def test_stamp_names_commit_dirtiness_and_config():
    state = {"commit": "0123456789abcdef" * 2 + "01234567", "dirty": True}
    text = provenance.stamp("f" * 64, state)
    assert text == "tapernorm 0123456789ab (dirty tree) · config ffffffffffff"
    assert provenance.stamp(None, {"commit": "unknown", "dirty": None}) == (
        "tapernorm commit unknown"
    )


def test_a_run_records_what_made_it(shards_dir, tmp_path):
    cfg = tiny_run(shards_dir, train={"steps": 4}, meta={"label": "x"})
    train(cfg, tmp_path / "run")
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    meta = written["meta"]
    assert meta["label"] == "x"
    made = meta["provenance"]
    assert made["commit"] == provenance.git_state()["commit"]
    assert made["host"]["cpu"] and made["versions"]["torch"]
    assert made["threads"] >= 1 and made["processes"] == 1
    assert made["started"] <= made["finished"] and made["resumed_from_step"] == 0
    # the run's identity is its config, not this record: a rerun resumes (nothing to train)
    again = train(cfg, tmp_path / "run")
    assert again["val_loss"] == json.loads((tmp_path / "run" / "eval.json").read_text())["val_loss"]
