"""A new user's mistakes: nothing they own is removed or replaced, no number is silently wrong,
and each mistake ends in one line that names the path and the fix (issue 40)."""

import json

import pytest
from conftest import tiny_run
from test_errors import one_line, run_cli, tiny_yaml

from tapernorm.out_dirs import PathInUse, claim_dir, install_dir, refuse_inside
from tapernorm.train import train


def users_files(directory, **files) -> dict:
    """Write the user's files into `directory`; returns {name: content} to check them by."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("_dot_", ".")).write_text(text)
    return {name.replace("_dot_", "."): text for name, text in files.items()}


def unchanged(directory, files: dict) -> bool:
    return all((directory / name).read_text() == text for name, text in files.items())


# ---- the rule: claim_dir, refuse_inside, install_dir ------------------------------------------------


def test_claim_dir_refuses_a_directory_of_other_files(tmp_path):
    users_files(tmp_path / "out", notes_dot_txt="mine")
    with pytest.raises(PathInUse, match=r"--out .*out holds files tapernorm fold did not write"):
        claim_dir(tmp_path / "out", "fold", lambda out: False)
    claim_dir(tmp_path / "out", "fold", lambda out: False, force=True)  # opt-in
    claim_dir(tmp_path / "out", "fold", lambda out: True)  # its own earlier output
    claim_dir(tmp_path / "absent", "fold", lambda out: False)
    (tmp_path / "empty").mkdir()
    claim_dir(tmp_path / "empty", "fold", lambda out: False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(PathInUse, match="is a file, not a directory"):
        claim_dir(tmp_path / "file", "fold", lambda out: True)


def test_refuse_inside_an_input(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(PathInUse, match=r"--out .*run is the model directory"):
        refuse_inside(tmp_path / "run", {"model directory": tmp_path / "run"})
    with pytest.raises(PathInUse, match=r"lies inside the model directory"):
        refuse_inside(tmp_path / "run" / "hf", {"model directory": tmp_path / "run"})
    refuse_inside(tmp_path / "hf", {"model directory": tmp_path / "run", "data": None})


def test_install_dir_keeps_files_it_did_not_write(tmp_path):
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    users = users_files(out, notes_dot_txt="mine", old_dot_bin="an earlier output's")
    (out / "verify.json").write_text("{}")
    tmp.mkdir()
    (tmp / "verify.json").write_text('{"new": 1}')
    (tmp / "model.bin").write_text("new")
    install_dir(
        tmp, out, lambda name: name.endswith(".bin") or name == "verify.json", "verify.json"
    )
    assert sorted(p.name for p in out.iterdir()) == ["model.bin", "notes.txt", "verify.json"]
    assert (out / "notes.txt").read_text() == users["notes.txt"]
    assert json.loads((out / "verify.json").read_text()) == {"new": 1} and not tmp.exists()


# ---- train ------------------------------------------------------------------------------------------


def test_train_refuses_a_directory_that_is_not_a_run(shards_dir, tmp_path, capsys):
    out = tmp_path / "mine"
    users = users_files(out, config_dot_json='{"my": "settings"}', metrics_dot_jsonl="my notes\n")
    config = tiny_yaml(tmp_path / "run.yaml", shards_dir, steps=2)
    status, err = run_cli(["train", "--config", config, "--out", str(out)], capsys)
    line = one_line(err)
    assert status == 2 and f"--out {out} holds files tapernorm train did not write" in line
    assert "config.json, metrics.jsonl" in line and "--force" in line
    assert unchanged(out, users) and sorted(p.name for p in out.iterdir()) == sorted(users)


def test_train_force_replaces_only_the_runs_files(shards_dir, tmp_path):
    out = tmp_path / "mine"
    users = users_files(out, notes_dot_txt="keep me", config_dot_json="{}")
    train(tiny_run(shards_dir, train={"steps": 4, "warmup_steps": 1}), out, force=True)
    assert unchanged(out, {"notes.txt": users["notes.txt"]})
    assert json.loads((out / "config.json").read_text())["name"] == "tiny"
    # its own run now: a rerun needs no --force, and the user's file stays
    assert train(tiny_run(shards_dir, train={"steps": 4, "warmup_steps": 1}), out)["steps"] == 4
    assert unchanged(out, {"notes.txt": users["notes.txt"]})


def test_train_refuses_an_out_inside_its_data(shards_dir, tmp_path):
    with pytest.raises(PathInUse, match=r"lies inside the data directory \(data.dir\)"):
        train(tiny_run(shards_dir, train={"steps": 4, "warmup_steps": 1}), shards_dir / "run")
