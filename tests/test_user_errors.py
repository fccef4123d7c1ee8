"""A new user's mistakes: nothing they own is removed or replaced, no number is silently wrong,
and each mistake ends in one line that names the path and the fix (issue 40)."""

import json

import pytest
from conftest import tiny_run
from test_errors import one_line, run_cli, tiny_yaml

from tapernorm.runtime.out_dirs import PathInUse, claim_dir, install_dir, refuse_inside
from tapernorm.training.loop import train


def error_line(err: str) -> str:
    """The one line of stderr, past the progress bars transformers draws while loading."""
    return one_line("\n".join(x for x in err.splitlines() if "it/s]" not in x))


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


# ---- export-hf and taper-hf --------------------------------------------------------------------------


@pytest.fixture
def g0_model_dir(tmp_path):
    """A saved GPT whose every norm is a TaperNorm at g=0 (it exports)."""
    import torch

    from tapernorm.model import GPT, GPTConfig
    from tapernorm.norms import set_gate
    from tapernorm.training.checkpoint import save_model

    torch.manual_seed(0)
    model = GPT(GPTConfig("llama", 1, 2, 32, 50, 16, taper="all"))
    set_gate(model, 0.0)
    save_model(model, tmp_path / "model")
    return tmp_path / "model"


def test_export_hf_refuses_a_directory_of_the_users(g0_model_dir, tmp_path, capsys):
    pytest.importorskip("transformers")
    out = tmp_path / "mine"
    users = users_files(out, notes_dot_txt="mine", config_dot_json='{"my": 1}')
    status, err = run_cli(["export-hf", "--model", str(g0_model_dir), "--out", str(out)], capsys)
    assert status == 2 and "holds files tapernorm export-hf did not write" in one_line(err)
    assert unchanged(out, users) and len(list(out.iterdir())) == 2
    # --force: the export's files replace those of their names; the user's other file stays
    argv = ["export-hf", "--model", str(g0_model_dir), "--out", str(out), "--force"]
    assert run_cli(argv, capsys)[0] == 0
    assert unchanged(out, {"notes.txt": "mine"}) and (out / "model.safetensors").is_file()
    assert json.loads((out / "verify.json").read_text())["ok"]


def test_export_hf_again_keeps_what_the_user_added(g0_model_dir, tmp_path, capsys):
    pytest.importorskip("transformers")
    out = tmp_path / "hf"
    argv = ["export-hf", "--model", str(g0_model_dir), "--out", str(out)]
    assert run_cli(argv, capsys)[0] == 0
    (out / "tokenizer.model").write_text("an earlier export's")  # (its own: removed)
    users = users_files(out, my_notes_dot_md="mine")
    assert run_cli(argv, capsys)[0] == 0  # its own earlier output: no --force needed
    assert unchanged(out, users) and not (out / "tokenizer.model").exists()
    (out / "verify.json").unlink()  # (Snakemake deletes a job's outputs before it reruns it)
    assert run_cli(argv, capsys)[0] == 0 and unchanged(out, users)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_export_hf_refuses_an_out_inside_its_model(g0_model_dir, capsys):
    before = sorted(p.name for p in g0_model_dir.iterdir())
    for out in (g0_model_dir, g0_model_dir / "hf"):
        argv = ["export-hf", "--model", str(g0_model_dir), "--out", str(out)]
        status, err = run_cli(argv, capsys)
        assert status == 2 and "the model directory (--model)" in one_line(err)
        assert "give --out a path outside" in err
    assert sorted(p.name for p in g0_model_dir.iterdir()) == before


def test_taper_hf_refuses_a_directory_of_the_users(shards_dir, tmp_path, capsys):
    users = users_files(tmp_path / "mine", notes_dot_txt="mine")
    argv = ["taper-hf", "--model", "gpt2", "--data", str(shards_dir), "--out"]
    status, err = run_cli([*argv, str(tmp_path / "mine")], capsys)
    assert status == 2 and "holds files tapernorm taper-hf did not write" in one_line(err)
    assert unchanged(tmp_path / "mine", users)
    status, err = run_cli([*argv, str(shards_dir / "out")], capsys)
    assert status == 2 and "lies inside the token shards (--data)" in one_line(err)


def hf_model_dir(tmp_path, kind: str, **config) -> str:
    from conftest import tiny_hf_lm

    tiny_hf_lm(kind, vocab=512, **config).save_pretrained(tmp_path / kind)
    return str(tmp_path / kind)


def test_taper_hf_on_an_unsupported_architecture(shards_dir, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=512, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertForMaskedLM(config).save_pretrained(tmp_path / "bert")
    capsys.readouterr()  # (save_pretrained's progress bar)
    out = tmp_path / "out"
    argv = ["taper-hf", "--model", str(tmp_path / "bert"), "--data", str(shards_dir)]
    status, err = run_cli([*argv, "--out", str(out)], capsys)
    line = error_line(err)
    assert status == 2 and f"{tmp_path / 'bert'} is a 'bert' model (BertForMaskedLM)" in line
    assert "supported model_type: gpt2, llama, mistral, qwen2" in line and not out.exists()


@pytest.mark.parametrize(
    "kind,config,named",
    [
        ("llama", {"hidden_act": "gelu"}, "hidden_act='gelu' (only silu)"),
        ("gpt2", {"activation_function": "relu"}, "activation_function='relu'"),
        ("gpt2", {"scale_attn_weights": False}, "(only scale_attn_weights=True)"),
        ("qwen2", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "RoPE scaling"),
    ],
)
def test_taper_hf_on_an_unsupported_setting(shards_dir, tmp_path, capsys, kind, config, named):
    pytest.importorskip("transformers")
    model = hf_model_dir(tmp_path, kind, **config)
    capsys.readouterr()  # (save_pretrained's progress bar)
    argv = ["taper-hf", "--model", model, "--data", str(shards_dir), "--out", str(tmp_path / "o")]
    status, err = run_cli(argv, capsys)
    line = error_line(err)
    assert status == 2 and named in line and "which tapernorm's GPT does not model" in line
    assert not (tmp_path / "o").exists()


def test_taper_hf_model_and_data_disagree(shards_dir, tmp_path, capsys):
    pytest.importorskip("transformers")
    from conftest import tiny_hf_lm

    tiny_hf_lm("llama", vocab=101).save_pretrained(tmp_path / "small")
    capsys.readouterr()  # (save_pretrained's progress bar)
    argv = ["taper-hf", "--model", str(tmp_path / "small"), "--data", str(shards_dir)]
    status, err = run_cli([*argv, "--out", str(tmp_path / "o")], capsys)
    line = error_line(err)
    assert (
        status == 2 and f"init.from model hf:{tmp_path / 'small'} has a vocabulary of 101" in line
    )
    assert f"the data {shards_dir} (512)" in line and not (tmp_path / "o").exists()


# ---- data preparation, fold, eval, lr-grid ----------------------------------------------------------


def test_prepare_data_refuses_a_directory_of_the_users(tmp_path, capsys):
    users = users_files(tmp_path / "mine", meta_dot_json='{"mine": 1}')
    argv = ["prepare-data", "--corpus", "shakespeare", "--out", str(tmp_path / "mine")]
    status, err = run_cli(argv, capsys)
    assert status == 2 and "holds files tapernorm prepare-data did not write" in one_line(err)
    assert unchanged(tmp_path / "mine", users)


def test_prepare_eval_and_rehearsal_inputs_refuse_a_directory_of_the_users(tmp_path, capsys):
    users = users_files(tmp_path / "mine", rows_dot_bin="mine", notes_dot_txt="mine")
    for argv in (
        ["prepare-eval", "--set", "heldout", "--shards", str(tmp_path / "none")],
        ["rehearsal-inputs"],
    ):
        status, err = run_cli([*argv, "--out", str(tmp_path / "mine")], capsys)
        assert status == 2 and f"tapernorm {argv[0]} did not write" in one_line(err)
        assert unchanged(tmp_path / "mine", users)


def test_a_vocabulary_too_small_for_the_corpus_names_the_smallest(tmp_path, capsys):
    from tapernorm.data import train_sentencepiece

    docs = ["abcdefghij klmnopqrst\nuvwxyz ABCDEFGHIJ"] * 3
    with pytest.raises(ValueError, match=r"needs at least (\d+) .*--vocab-size\) to \1 or more"):
        train_sentencepiece(docs, 20, str(tmp_path / "sp"), byte_fallback=False)
    smallest = len(set("".join(docs))) + 2  # every character but the newline piece, + unk, eot
    for vocab in (smallest - 1, smallest):
        try:
            train_sentencepiece(docs, vocab, str(tmp_path / "sp"), byte_fallback=False)
        except ValueError as e:
            assert vocab == smallest - 1 and f"needs at least {smallest} " in str(e)


def test_fold_refuses_an_out_inside_its_model_and_data_of_another_vocabulary(
    g0_model_dir, shards_dir, tmp_path, capsys
):
    argv = ["fold", "--model", str(g0_model_dir), "--data", str(shards_dir), "--out"]
    status, err = run_cli([*argv, str(g0_model_dir / "folded")], capsys)
    assert status == 2 and "lies inside the model directory (--model)" in one_line(err)
    status, err = run_cli([*argv, str(tmp_path / "fold")], capsys)  # vocab 50 < the shards' 512
    line = one_line(err)
    assert status == 2 and f"the token shards {shards_dir} have a vocabulary of 512" in line
    assert f"the model {g0_model_dir} only 50" in line
    users = users_files(tmp_path / "mine", verify_dot_json="{}")
    status, err = run_cli([*argv, str(tmp_path / "mine")], capsys)
    assert status == 2 and "tapernorm fold did not write" in one_line(err)
    assert unchanged(tmp_path / "mine", users)


def test_eval_out_may_not_replace_an_input_or_a_users_file(
    g0_model_dir, shards_dir, tmp_path, capsys
):
    argv = ["eval", "--model", str(g0_model_dir), "--data", str(shards_dir), "--out"]
    status, err = run_cli([*argv, str(g0_model_dir / "config.json")], capsys)
    assert status == 2 and "lies inside the model (--model)" in one_line(err)
    users = users_files(tmp_path, result_dot_json='{"mine": 1}')
    status, err = run_cli([*argv, str(tmp_path / "result.json")], capsys)
    assert status == 2 and "is not an earlier output of tapernorm eval" in one_line(err)
    assert unchanged(tmp_path, users)


def grid_run(root, variant: str, seed: int, lr: float, loss: float = 3.5, steps: int = 100):
    from tapernorm.analysis.studies.lr_grid import GridRun

    d = root / GridRun(variant, 64, seed, lr).name
    d.mkdir(parents=True)
    (d / "eval.json").write_text(json.dumps({"val_loss": loss, "diverged": False}))
    model = {"n_embd": 64, "n_layer": 2, "n_head": 2, "block_size": 32}
    train = {"lr": lr, "steps": steps, "batch_size": 4, "grad_accum": 1}
    cfg = {"variant": variant, "seed": seed, "model": model, "train": train}
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def grid_runs(root) -> list[str]:
    """A whole DyT/untied-baseline LR grid: 2 seeds x 2 LRs of each arm."""
    return [
        grid_run(root, variant, seed, lr)
        for variant in ("dyt", "baseline_untied")
        for seed in (0, 1)
        for lr in (1e-3, 3e-3)
    ]


def test_lr_grid_with_a_run_missing_or_a_shared_lr_off_the_grid(tmp_path, capsys):
    runs = grid_runs(tmp_path / "runs")
    argv = ["lr-grid", "--shared-lr", "1e-3", "--out", str(tmp_path / "grid"), "--runs"]
    status, err = run_cli([*argv, *runs[1:]], capsys)
    line = one_line(err)
    assert (
        status == 2 and "the grid is incomplete: 1 of 8 runs missing (dyt-d64-s0-lr0.001)" in line
    )
    assert not (tmp_path / "grid").exists()
    argv[2] = "2e-3"
    status, err = run_cli([*argv, *runs], capsys)
    assert status == 2 and "--shared-lr 0.002 is not an LR of the grid (0.001, 0.003)" in err
    users = users_files(tmp_path / "mine", lr_grid_dot_md="mine")
    argv[2], argv[4] = "1e-3", str(tmp_path / "mine")
    status, err = run_cli([*argv, *runs], capsys)
    assert status == 2 and "tapernorm lr-grid did not write" in one_line(err)
    assert unchanged(tmp_path / "mine", users)


def test_lr_grid_runs_of_another_scale_or_without_a_run_config(tmp_path, capsys):
    runs = [
        grid_run(tmp_path / "runs", variant, seed, lr, steps=200 if lr == 3e-3 else 100)
        for variant in ("dyt", "baseline_untied")
        for seed in (0, 1)
        for lr in (1e-3, 3e-3)
    ]
    argv = ["lr-grid", "--shared-lr", "1e-3", "--out", str(tmp_path / "grid"), "--runs", *runs]
    status, err = run_cli(argv, capsys)
    line = one_line(err)
    assert (
        status == 2 and f"runs {runs[0]} and {runs[1]} differ in train.steps (100 and 200)" in line
    )
    assert "give --runs of one grid" in line and not (tmp_path / "grid").exists()
    config = tmp_path / "runs/dyt-d64-s0-lr0.001/config.json"
    config.write_text(json.dumps({"variant": "dyt", "seed": 0, "model": {"n_embd": 64}}))
    status, err = run_cli(argv, capsys)
    assert status == 2 and f"{config} has no train.lr: not a run config of tapernorm train" in err


# ---- reference runs and the README's generated blocks -----------------------------------------------


def reference_of(run_tree, log: str, jobs: str):
    """A reference run of `run_tree` with one job record, made by a run whose log is `log` with
    the job stats `jobs`; returns its directory, relative to run_tree."""
    from tapernorm.artifact import manifest, reference

    record = run_tree / "results/job_records/train/pretrain/baseline-d64-s0.tsv"
    record.parent.mkdir(parents=True)
    record.write_text("s\n12.5\n")
    files = [str(p.relative_to(run_tree)) for p in run_tree.rglob("*") if p.is_file()]
    files = [f for f in files if not f.startswith((".snakemake", "results/manifest.json"))]
    config = {"pretrain": {"variants": ["baseline"], "seeds": 1}}
    manifest.write_manifest(run_tree / "results/manifest.json", files, config, {}, run_tree)
    (run_tree / "snakemake.log").write_text(log.replace("Job stats:\n", f"Job stats:\n{jobs}"))
    ref = reference.snapshot(run_tree / "results/manifest.json", log=run_tree / "snakemake.log")
    return ref.relative_to(run_tree).as_posix()


def render(run_tree, kind: str, rel: str) -> str:
    from tapernorm.artifact import doc_blocks

    readme = run_tree / "README.md"
    readme.write_text(
        f"<!-- generated by `tapernorm docs`: {kind} from {rel} -->\n{doc_blocks.END}\n"
    )
    doc_blocks.sync_documents(run_tree)
    return readme.read_text()


STATS = "job    count\n-----  -----\n{rules}total  2\n\n"
CI_LOG = "  Config file(s): ['config/ci.yaml']\n"


@pytest.mark.parametrize(
    "rules,whole", [("claims  1\nall  1\n", False), ("train  1\nall  1\n", True)]
)
def test_a_reference_says_what_ran_and_of_which_config(run_tree, rules, whole):
    from conftest import LOG

    rel = reference_of(run_tree, CI_LOG + LOG, STATS.format(rules=rules))
    results, cost = render(run_tree, "results", rel), render(run_tree, "cost", rel)
    if whole:
        assert "the whole DAG (2 jobs) took" in results
        assert "The reference run of `config/ci.yaml` took" in cost
    else:
        assert "a partial rerun (2 jobs; not the whole DAG) took" in results
        assert "whole DAG (2" not in results
        assert "A partial rerun (not the whole DAG) of `config/ci.yaml` took" in cost
    assert "default config" not in cost


def test_an_edited_reference_record_is_not_quoted(run_tree, capsys):
    from conftest import LOG

    from tapernorm.artifact import reference

    rel = reference_of(run_tree, LOG, STATS.format(rules="train  1\nall  1\n"))
    assert "default config" not in render(run_tree, "cost", rel)  # (its log names none)
    claims = run_tree / rel / "results/claims.json"
    claims.write_text(claims.read_text().replace("+1.13%", "+0.13%"))
    with pytest.raises(reference.ReferenceError, match="differ from its manifest.json"):
        render(run_tree, "results", rel)
    status, err = run_cli(["docs", "--check", "--repo", str(run_tree)], capsys)
    assert status == 2 and "changed: results/claims.json" in one_line(err)


def test_a_generated_block_without_its_end_is_not_rewritten(run_tree, capsys):
    from tapernorm.artifact import doc_blocks

    begin = "<!-- generated by `tapernorm docs`: results from results/reference/x -->"
    text = f"{begin}\nmine\n{begin}\nmine too\n{doc_blocks.END}\n"
    (run_tree / "README.md").write_text(text)
    status, err = run_cli(["docs", "--repo", str(run_tree)], capsys)
    assert status == 2 and "has no '<!-- end generated -->' before the next" in one_line(err)
    assert (run_tree / "README.md").read_text() == text


# ---- the workflow from a read-only checkout ---------------------------------------------------------


def test_a_run_in_another_directory_reads_the_committed_lr_grid(tmp_path):
    import shutil

    from test_workflow import ROOT, snakemake

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(ROOT / "Snakefile", checkout)
    for part in ("workflow", "config"):
        shutil.copytree(ROOT / part, checkout / part)
    grid = checkout / "results/cpu/lr_grid/lr_grid.json"
    grid.parent.mkdir(parents=True)
    grid.write_text("{}")
    other = tmp_path / "elsewhere"
    argv = ["-n", "-p", "-d", str(other), "--configfile", "config/config.yaml", "--"]
    out = snakemake(checkout, *argv, "results/claims.md").stdout
    assert f"--lr-grid {grid}" in out
    assert not (other / "results").exists()  # (a dry run: nothing written there)


def test_a_lock_path_that_is_no_lock_file_is_one_line_with_the_fix(shards_dir, tmp_path, capsys):
    (tmp_path / "run" / "train.lock").mkdir(parents=True)  # (left by something else)
    config = tiny_yaml(tmp_path / "run.yaml", shards_dir, steps=2)
    status, err = run_cli(["train", "--config", config, "--out", str(tmp_path / "run")], capsys)
    line = one_line(err)
    assert status == 2 and f"{tmp_path / 'run' / 'train.lock'}, the run's lock file" in line
    assert "remove it" in line and (tmp_path / "run" / "train.lock").is_dir()


# ---- commands writing files the user names (out_files) ----------------------------------------------


def test_table_files_are_replaced_only_when_the_command_wrote_them(tmp_path, capsys):
    records = tmp_path / "records/train/pretrain"
    records.mkdir(parents=True)
    (records / "a.tsv").write_text("s\n12.5\n")
    argv = ["job-times", str(tmp_path / "records"), "--out", str(tmp_path / "jt")]
    assert run_cli(argv, capsys)[0] == 0
    assert run_cli(argv, capsys)[0] == 0  # its own earlier output
    (tmp_path / "jt.md").unlink()  # the .csv is still known by the stamped .tex and .html
    users = users_files(tmp_path, jt_dot_tex="mine")
    status, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == 2 and f"{tmp_path / 'jt.tex'} exists and is not an earlier output" in line
    assert "tapernorm job-times: give another --out, or add --force" in line
    assert unchanged(tmp_path, users)
    assert run_cli([*argv, "--force"], capsys)[0] == 0
    assert "Made by tapernorm " in (tmp_path / "jt.tex").read_text()
    users = users_files(tmp_path / "mine", t2_dot_csv="mine")  # a csv with no table beside it
    argv = ["table", "2", "--runs", str(tmp_path / "none"), "--out", str(tmp_path / "mine/t2")]
    status, err = run_cli(argv, capsys)
    assert status == 2 and "t2.csv exists and is not an earlier output of tapernorm table" in err
    assert unchanged(tmp_path / "mine", users)


def test_a_figures_files_are_known_by_their_stamp(tmp_path, capsys):
    from tapernorm.analysis.figures.style import new_figure, save_figure
    from tapernorm.runtime.out_files import stamped
    from tapernorm.runtime.provenance import REHEARSAL

    for name, stamp in (("plain", "tapernorm 0123456789ab"), ("r", f"{REHEARSAL} · tapernorm x")):
        fig, axes = new_figure(1, 1, (2, 2))
        axes[0].plot([1, 2])
        stamp = stamp.replace("x", "commit unknown (dirty tree)")
        for path in save_figure(fig, tmp_path / f"{name}.pdf", "caption", stamp):
            assert stamped(path), path  # (the rehearsal's PDF holds it as UTF-16)
    users = users_files(tmp_path, fig3_dot_png="mine")
    argv = ["figure", "fig3", "--runs", str(tmp_path / "none"), "--out"]
    status, err = run_cli([*argv, str(tmp_path / "fig3.pdf")], capsys)
    assert status == 2 and "fig3.png exists and is not an earlier output of tapernorm figure" in err
    assert unchanged(tmp_path, users) and not stamped(tmp_path / "fig3.png")


def test_claims_and_report_home_keep_the_users_files(tmp_path, capsys):
    users = users_files(tmp_path, claims_dot_json='{"mine": 1}')
    status, err = run_cli(["claims", "--out", str(tmp_path / "claims.md")], capsys)
    assert status == 2 and "claims.json exists and is not an earlier output" in one_line(err)
    assert unchanged(tmp_path, users) and not (tmp_path / "claims.md").exists()
    (tmp_path / "claims.json").unlink()
    for _ in range(2):  # the second time over its own earlier output
        assert run_cli(["claims", "--out", str(tmp_path / "claims.md")], capsys)[0] == 0
    home = ["report-home", "--claims", str(tmp_path / "claims.json"), "--out"]
    status, err = run_cli([*home, str(tmp_path / "claims.json")], capsys)
    assert status == 2 and "is the claims record (--claims)" in one_line(err)
    for _ in range(2):
        assert run_cli([*home, str(tmp_path / "home.rst")], capsys)[0] == 0
    status, err = run_cli([*home, str(tmp_path / "claims.md")], capsys)  # stamped, not a page
    assert status == 2 and "not an earlier output of tapernorm report-home" in one_line(err)


def test_manifest_env_lock_env_and_bench_keep_the_users_files(tmp_path, capsys):
    from test_workflow import ROOT

    from tapernorm.machine.env_lock import is_lock_file

    users = users_files(tmp_path, mine_dot_json='{"mine": 1}', mine_dot_csv="a,b\n1,2\n")
    mine, csv = str(tmp_path / "mine.json"), str(tmp_path / "mine.csv")
    for argv in (
        ["manifest", mine, "--config-json", "{}", "--out", mine],
        ["env", "--out", mine],
        ["lock-env", "--out", mine],
        ["bench", "train-step", "--out", mine],
        ["bench", "train-step", "--out", csv],
        ["bench", "forward", "--out", csv],
        ["bench", "decode", "--out", csv],
    ):
        status, err = run_cli(argv, capsys)
        line = one_line(err)
        assert status == 2 and "exists and is not an earlier output of tapernorm" in line, argv
        assert "add --force to replace it" in line
    assert unchanged(tmp_path, users)
    manifest = ["manifest", mine, "--config-json", "{}", "--out", str(tmp_path / "m.json")]
    assert run_cli(manifest, capsys)[0] == 0 and run_cli(manifest, capsys)[0] == 0
    assert run_cli(["env", "--out", str(tmp_path / "env.json")], capsys)[0] == 0
    assert run_cli(["env", "--out", str(tmp_path / "env.json")], capsys)[0] == 0
    assert is_lock_file(ROOT / "requirements/constraints-cpu.txt")  # (lock-env's default --out)
    assert not is_lock_file(tmp_path / "mine.csv")


def test_lr_grid_force_writes_beside_the_users_files(tmp_path, capsys):
    runs = grid_runs(tmp_path / "runs")
    users = users_files(tmp_path / "mine", notes_dot_txt="mine")
    argv = ["lr-grid", "--shared-lr", "1e-3", "--out", str(tmp_path / "mine"), "--runs", *runs]
    assert run_cli(argv, capsys)[0] == 2
    assert run_cli([*argv, "--force"], capsys)[0] == 0
    assert unchanged(tmp_path / "mine", users) and (tmp_path / "mine/lr_grid.json").is_file()
    assert run_cli(argv, capsys)[0] == 0  # its own summary now


def test_selftest_only_matching_no_check(capsys):
    from tapernorm.machine import selftest

    status, err = run_cli(["selftest", "--device", "cpu", "--only", "no such check"], capsys)
    line = one_line(err)
    assert status == 2 and "--only 'no such check' matches no check's name" in line
    assert selftest.LOOP in line
    ran = selftest.run_selftest("meta", only="decode", report=lambda line: None)
    assert [r.name for r in ran] == [n for n in selftest.check_names() if "decode" in n]


def test_job_times_of_no_record_is_an_error(tmp_path, capsys):
    (tmp_path / "records/train").mkdir(parents=True)
    status, err = run_cli(["job-times", str(tmp_path / "records")], capsys)
    assert status == 2 and "no job records (.tsv) under" in one_line(err)
    argv = ["job-times", str(tmp_path / "records"), "--jobs", "train/a.tsv", "--out"]
    status, err = run_cli([*argv, str(tmp_path / "jt")], capsys)
    line = one_line(err)
    assert status == 2 and "none of the 1 records --jobs names is under" in line
    assert "(e.g. train/a.tsv)" in line and not list(tmp_path.glob("jt*"))
    (tmp_path / "records/train/a.tsv").write_text("s\nnan\n")
    status, err = run_cli(argv[:-1], capsys)
    assert status == 2 and "its time nan s is not a finite number of seconds" in one_line(err)


@pytest.mark.parametrize(
    "edit,named",
    [
        (lambda c: c["model"].update(n_embd=64), "has shape [32, 32], the model wants [64, 64]"),
        (lambda c: c.pop("model"), "has no valid model: model: it is missing"),
    ],
)
def test_a_models_config_and_weights_that_disagree(g0_model_dir, shards_dir, capsys, edit, named):
    config = json.loads((g0_model_dir / "config.json").read_text())
    edit(config)
    (g0_model_dir / "config.json").write_text(json.dumps(config))
    for argv in (
        ["eval", "--model", str(g0_model_dir), "--data", str(shards_dir)],
        ["fold", "--model", str(g0_model_dir), "--data", str(shards_dir), "--out", "unused"],
    ):
        status, err = run_cli(argv, capsys)
        line = one_line(err)
        assert status == 2 and named in line and str(g0_model_dir / "config.json") in line
        if "shape" in named:
            assert f"{g0_model_dir / 'model.safetensors'} does not match" in line
            assert "put back the config.json saved with them" in line


def test_gpu_report_keeps_the_users_files_and_unpacks_only_results(tmp_path, capsys):
    import io
    import tarfile

    check = tmp_path / "check"
    users = users_files(check / "report", table3_dot_md="my notes on table 3")
    (check / "results").mkdir()
    status, err = run_cli(["gpu-report", str(check)], capsys)
    line = one_line(err)
    assert status == 2 and f"{check / 'report/table3.md'} exists and is not an earlier" in line
    assert unchanged(check / "report", users)
    (check / "results").rmdir()
    users = users_files(check, summary_dot_md="mine")
    with tarfile.open(check / "results.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("summary.md")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"theirs"))
    status, err = run_cli(["gpu-report", str(check), "--force"], capsys)
    assert status == 2 and "member 'summary.md' is not under results/" in one_line(err)
    assert unchanged(check, users)


def test_a_run_directory_whose_files_are_damaged_names_the_fix(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run/config.json").write_text('{"seed": ')
    argv = ["table", "1", "--runs", str(tmp_path / "run"), "--out", str(tmp_path / "t")]
    status, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == 2 and "config.json is not valid JSON" in line
    assert "rerun `tapernorm train` on the run" in line
