"""Provenance: the commit and dirtiness of a work tree, config hashes, stamps, and what a run's
config.json records of what made it."""

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from conftest import tiny_run

from tapernorm.runtime import provenance
from tapernorm.training.loop import train


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "src").mkdir()
    (tmp_path / "src/a.py").write_text("a\n")
    _git(tmp_path, "add", "src/a.py")
    _git(tmp_path, "commit", "-q", "-m", "a")
    return tmp_path


def test_git_state_names_the_commit_and_a_dirty_tree(repo, monkeypatch):
    monkeypatch.delenv(provenance.ALLOW_DIRTY_ENV)
    clean = provenance.git_state(repo)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False
    (repo / "src/a.py").write_text("changed\n")
    assert provenance.git_state(repo) == {
        "commit": clean["commit"],
        "dirty": True,
        "changed": [" M src/a.py"],
        "n_changed": 1,
        "code_changed": ["src/a.py"],
        "code_dirty": True,
    }
    monkeypatch.setenv(provenance.ALLOW_DIRTY_ENV, "1")  # (--allow-dirty): said where code is dirty
    assert provenance.git_state(repo)["allow_dirty"] is True
    (repo / "src/a.py").write_text("a\n")
    (repo / "src/new.py").write_text("")  # an untracked file changes the code too
    assert provenance.git_state(repo)["dirty"] is True
    assert provenance.git_state(repo)["code_dirty"] is True


def test_a_tree_dirty_with_results_only_says_its_code_is_clean(repo, monkeypatch):
    """A study's new records (untracked under results/) make the tree dirty, not its code."""
    monkeypatch.delenv(provenance.ALLOW_DIRTY_ENV)
    (repo / "results/cpu/study/runs/r1").mkdir(parents=True)
    (repo / "results/cpu/study/runs/r1/eval.json").write_text("{}")
    state = provenance.git_state(repo)
    assert state["dirty"] is True and state["code_dirty"] is False
    assert state["changed"] == ["?? results/"] and state["n_changed"] == 1
    assert "allow_dirty" not in state  # (nothing to allow)
    assert provenance.short_commit(state).endswith(" (code clean; uncommitted results)")
    (repo / "src/b.py").write_text("")
    assert provenance.git_state(repo)["code_dirty"] is True
    assert provenance.short_commit(provenance.git_state(repo)).endswith(" (dirty tree)")
    monkeypatch.setenv(provenance.ALLOW_DIRTY_ENV, "1")
    allowed = provenance.short_commit(provenance.git_state(repo))
    assert allowed.endswith(" (dirty code, --allow-dirty)")


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
    assert made["distributions"] == provenance.distributions()  # every installed one
    assert made["threads"] >= 1 and made["processes"] == 1
    assert made["started"] <= made["finished"] and made["resumed_from_step"] == 0
    # the data's bytes (what an aggregate compares across a cell's runs: analysis/comparable.py)
    data = made["data_sha256"]
    assert set(data) >= {"meta.json", "train.bin", "val.bin"}
    assert data["train.bin"] == hashlib.sha256((shards_dir / "train.bin").read_bytes()).hexdigest()
    # the run's identity is its config, not this record: a rerun resumes (nothing to train)
    again = train(cfg, tmp_path / "run")
    assert again["val_loss"] == json.loads((tmp_path / "run" / "eval.json").read_text())["val_loss"]


def test_config_file_hash_follows_the_files_bytes_not_the_schemas_defaults(tmp_path, monkeypatch):
    """config_file_sha256 is the file's; config_sha256 the validated config's, which moves when a
    default of the schema changes while config/config.yaml does not."""
    from tapernorm.config import yaml_load
    from tapernorm.workflow import validate_pipeline_config

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    schema = root / "workflow/schemas/config.schema.yaml"
    changed = tmp_path / "config.schema.yaml"
    old = 'figure_width: {type: [integer, "null"], default: null,'
    assert old in schema.read_text()  # (a default config/config.yaml leaves to the schema)
    changed.write_text(schema.read_text().replace(old, old.replace("null,", "64,")))
    raw = yaml_load(Path("config/config.yaml").read_text(), "config/config.yaml")
    hashes = [
        provenance.config_hash(validate_pipeline_config(raw, str(s))) for s in (schema, changed)
    ]
    assert hashes[0] != hashes[1]
    files = provenance.config_file_hashes(["config/config.yaml"])
    assert files == {
        "config/config.yaml": hashlib.sha256(Path("config/config.yaml").read_bytes()).hexdigest()
    }
    assert provenance.config_file_hashes([root / "config/config.yaml"]) == files  # absolute: same


def test_config_file_hashes_keep_each_file_in_order(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("x: 1\n")
    b.write_text("x: 1  # the same config, other bytes\n")
    hashes = provenance.config_file_hashes([b, a])
    assert list(hashes) == [b.as_posix(), a.as_posix()] and len(set(hashes.values())) == 2


def test_made_lists_every_distribution_only_where_asked():
    """A manifest's "made" lists every installed distribution; a summary's and the claims' do not
    (the same keys in the same order otherwise: the records' bytes depend on it)."""
    full, brief = provenance.made(), provenance.made(every_distribution=False)
    assert list(full) == [*provenance.git_state(), "host", "versions", "distributions", "written"]
    assert full["distributions"] == provenance.distributions()
    assert list(brief) == [k for k in full if k != "distributions"]
    assert brief["versions"] == full["versions"] and brief["host"] == full["host"]
