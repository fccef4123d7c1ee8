"""A diverged run stops nothing after it: it says so in its own outputs; its fold, its folded
model's evaluation and its export are skipped with the reason; the benchmarks time the other models
and name it; tables 3, the decode table, figure 5, claims 6, 7 and the DyT row say why.

Divergence is real and deterministic here: the scale loss at lambda = 1e38 overflows the gradient
at the first step after the taper starts (the anchor's target freezes there)."""

import logging
import math
import shutil

import pandas as pd
import pytest
from conftest import tiny_run

from tapernorm import data as D
from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.claims.rows import NoVerdict
from tapernorm.analysis.figures import speedups as figure_speedups
from tapernorm.analysis.tables import finetune as ft
from tapernorm.analysis.tables import inference as inference_tables
from tapernorm.artifact.manifest import build_manifest
from tapernorm.bench.grid import summary_table
from tapernorm.cli import main
from tapernorm.runtime import jsonio
from tapernorm.training.divergence import diverged
from tapernorm.training.loop import train

DIVERGE = {"lam": 1e38}  # anchor: every step after the taper starts overflows
STEPS = {"steps": 12, "warmup_steps": 2}
TAPER = {"start": 5, "end": 10, "ema_mu": 0.1}
TAPER_DIVERGES_AT = 6  # the first step with g < 1: the target freezes and the scale loss overflows
KEPT = 3  # the last checkpoint before it (log.ckpt_every 3)


def _run(root, shards_dir, name, variant=None, anchor=None, **sections):
    cfg = tiny_run(
        shards_dir,
        name=f"pretrain/{name}" if variant else f"finetune/{name}",
        variant=variant,
        train=STEPS,
        taper=TAPER,
        log={"every": 1, "ckpt_every": KEPT, "eval_windows": 4},
        **({"anchor": anchor} if anchor else {}),
        **sections,
    )
    train(cfg, root / name)
    return root / name


def _finetune_meta(protocol: str) -> dict:
    return {"family": "finetune", "protocol": protocol, "model": "tiny", "label": "tiny GPT-2"}


@pytest.fixture(scope="module")
def runs(shards_dir, tmp_path_factory):
    """Pretrain-like runs (baseline, DyT, Internal-Taper (+aux) finished and diverged) and
    fine-tuning-like ones (Vanilla finished, All-TaperLN diverged), each 12 steps; and a log."""
    root = tmp_path_factory.mktemp("diverged")
    logger = logging.getLogger("tapernorm")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        out = {
            "baseline": _run(root, shards_dir, "baseline-d32-s0", "baseline"),
            "dyt": _run(root, shards_dir, "dyt-d32-s0", "dyt"),
            "tapered": _run(root, shards_dir, "internal_aux-d32-s1", "internal_aux"),
            "diverged": _run(root, shards_dir, "internal_aux-d32-s0", "internal_aux", DIVERGE),
        }
        gpt2 = {"style": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32}
        out["vanilla"] = _run(
            root, shards_dir, "vanilla-tiny", model=gpt2, meta=_finetune_meta("vanilla")
        )
        out["all_taperln"] = _run(
            root,
            shards_dir,
            "all_taperln-tiny",
            model={**gpt2, "taper": "all"},
            anchor={"enabled": True, **DIVERGE},
            meta=_finetune_meta("all_taperln"),
        )
    finally:
        logger.removeHandler(handler)
    out["log"] = [r.getMessage() for r in records]
    out["root"] = root
    return out


def _relabel(src, dst, variant: str):
    """A copy of a run under another variant's name (DyT's matched baseline, for the DyT row)."""
    shutil.copytree(src, dst)
    cfg = jsonio.read_json(dst / "config.json")
    jsonio.write_json(dst / "config.json", {**cfg, "variant": variant, "name": dst.name})
    return dst


def _mark_diverged(src, dst, step: int, weights_step: int = 0):
    """A copy of a finished run whose eval.json says it diverged (the library's JSON writer)."""
    shutil.copytree(src, dst)
    result = jsonio.read_json(dst / "eval.json")
    result.update(diverged=True, diverged_step=step, weights_step=weights_step, val_loss=None)
    jsonio.write_json(dst / "eval.json", result)
    return dst


# ---- 1. the run's own outputs -------------------------------------------------------------------


def test_a_diverged_run_says_so_in_its_log_config_and_eval(runs):
    run = runs["diverged"]
    result = jsonio.read_json(run / "eval.json")
    assert result["diverged"] and result["diverged_step"] == TAPER_DIVERGES_AT
    assert result["weights_step"] == 3  # its last checkpoint before the divergence
    cfg = jsonio.read_json(run / "config.json")
    assert cfg["diverged_step"] == TAPER_DIVERGES_AT and cfg["weights_step"] == 3
    (logged,) = [m for m in runs["log"] if "DIVERGED" in m and "internal_aux-d32-s0]" in m]
    assert logged.startswith("[pretrain/internal_aux-d32-s0]"), runs["log"]
    assert f"step {TAPER_DIVERGES_AT}:" in logged and "checkpoint of step 3" in logged
    bad = diverged(run)
    assert (bad.name, bad.step, bad.weights_step) == (
        "pretrain/internal_aux-d32-s0",
        TAPER_DIVERGES_AT,
        3,
    )
    assert bad.label == "Internal-Taper (+aux) d32 s0"
    # golden: the rendered text (the reason every later step gives when it skips the run)
    assert bad.reason() == (
        f"run pretrain/internal_aux-d32-s0 diverged at step {TAPER_DIVERGES_AT} "
        "(weights rolled back to step 3)"
    )
    not_timed = bad.not_timed()
    assert not_timed.startswith(f"{bad.label} ") and not_timed.endswith("not timed")
    assert f"step {TAPER_DIVERGES_AT}" in not_timed
    # a finished run: nothing of the kind
    finished = runs["tapered"]
    assert diverged(finished) is None and "diverged_step" not in jsonio.read_json(
        finished / "config.json"
    )
    assert not [m for m in runs["log"] if "internal_aux-d32-s1] DIVERGED" in m]


# ---- 2. fold, evaluation of the folded model, export -------------------------------------------


def test_fold_of_a_diverged_run_is_skipped_with_the_reason(runs, shards_dir, tmp_path, capsys):
    out = tmp_path / "fold"
    (out / "folded").mkdir(parents=True)
    (out / "folded" / "model.safetensors").write_bytes(b"an earlier export")
    args = ["fold", "--model", str(runs["diverged"]), "--data", str(shards_dir), "--out", str(out)]
    assert main(args) == 0
    verify = jsonio.read_json(out / "verify.json")
    assert verify["skipped"] == diverged(runs["diverged"]).reason() and verify["written"] == []
    assert (out / "folded").is_dir() and not any((out / "folded").iterdir())  # left empty
    assert (out / "scaled").is_dir() and not any((out / "scaled").iterdir())
    assert "skipped, nothing folded" in capsys.readouterr().err


def test_fold_of_a_finished_run_that_disagrees_still_fails(runs, shards_dir, tmp_path, monkeypatch):
    import tapernorm.fold as fold
    import tapernorm.training.fold_run as fold_cmd

    fold_model = fold.fold_model

    def wrong_fold(model):
        folded = fold_model(model)
        folded.lm_head.weight.data.mul_(1.01)  # a fold bug
        return folded

    monkeypatch.setattr(fold_cmd, "fold_model", wrong_fold)
    out = tmp_path / "fold"
    args = ["fold", "--model", str(runs["tapered"]), "--data", str(shards_dir), "--out", str(out)]
    with pytest.raises(fold.FoldVerificationError, match="disagrees"):
        fold_cmd.fold_run(runs["tapered"], shards_dir, out, windows=2, eval_windows=4)
    assert main([*args, "--windows", "2"]) == 2
    assert not (out / "verify.json").exists()


def test_eval_of_a_diverged_run_skips_its_folded_model(runs, shards_dir, tmp_path):
    D.prepare_eval_set("heldout", str(tmp_path / "set"), 17, shards_dir=str(shards_dir), max_rows=4)
    fold = tmp_path / "fold"
    run = runs["all_taperln"]
    assert main(["fold", "--model", str(run), "--data", str(shards_dir), "--out", str(fold)]) == 0
    evals = []
    for name, folded in (("all_taperln", ["--folded", str(fold / "folded")]), ("vanilla", [])):
        path = tmp_path / "evals" / f"{name}.json"
        args = ["eval", "--model", str(runs[name]), "--data", str(tmp_path / "set")]
        assert main([*args, "--batch-size", "2", "--out", str(path), *folded]) == 0
        evals.append(path)
    result = jsonio.read_json(evals[0])
    reason = diverged(run).reason()
    assert result["folded"] == {"model": str(fold / "folded"), "skipped": reason}
    assert result["diverged_note"] == reason and result["run"]["diverged"] is True
    assert result["run"]["diverged_step"] == TAPER_DIVERGES_AT

    table, caption = ft.table4(ft.load_finetune_evals(evals))
    ours = table[table["Model"] == "tiny GPT-2"].set_index("Protocol")
    owt = next(c for c in table.columns if c.endswith("in OWT's place (ours)"))
    assert ours.loc["All-TaperLN", owt] == f"diverged at step {TAPER_DIVERGES_AT}"
    assert ours.loc["All-TaperLN", "Folded − unfolded (ours)"] == "not folded (diverged)"
    assert math.isfinite(float(ours.loc["Vanilla", owt]))
    assert ft.diverged_runs(ft.load_finetune_evals(evals)) == [reason]  # what the caption names
    assert reason in caption
    table6, caption = ft.table6([runs["vanilla"], run])
    assert reason in caption and len(table6) == 1 + 4
    row = claims.claims_table(claims.ClaimInputs(finetune=ft.load_finetune_evals(evals))).iloc[7]
    assert "All/heldout: diverged" in row["Comment"] and reason in row["Comment"]


def test_export_of_a_diverged_run_is_skipped_with_the_reason(runs, tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "export"
    (out).mkdir()
    (out / "model.safetensors").write_bytes(b"an earlier export")  # (its verify.json deleted,
    (out / "config.json").write_text('{"rms_norm_eps": 7.378697629483821e19}')  # as Snakemake does)
    assert main(["export-hf", "--model", str(runs["all_taperln"]), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["verify.json"]
    verify = jsonio.read_json(out / "verify.json")
    assert verify["skipped"] == diverged(runs["all_taperln"]).reason()


def test_the_manifest_hashes_the_files_of_a_directory_it_is_given(tmp_path):
    (tmp_path / "fold" / "folded").mkdir(parents=True)
    (tmp_path / "fold" / "verify.json").write_text("{}")
    (tmp_path / "fold" / "folded" / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "fold" / "folded" / ".snakemake_timestamp").write_text("")
    files = build_manifest(["fold/verify.json", "fold/folded"], {}, {}, tmp_path)["files"]
    assert sorted(files) == ["fold/folded/model.safetensors", "fold/verify.json"]
    (tmp_path / "empty").mkdir()  # a skipped fold's folded/: nothing to hash
    assert "empty" not in build_manifest(["empty"], {}, {}, tmp_path)["files"]


# ---- 3. benchmarks, their tables, figure 5, claims 6, 7 and the DyT row ---------------------------

GRID = ["--batch-sizes", "1", "--repeats", "2", "--warmup", "0", "--device", "cpu"]


def _bench(tmp_path, baseline, tapered, dyt, name="") -> dict:
    models = ["--baseline", str(baseline), "--tapered", str(tapered), "--dyt", str(dyt)]
    paths = {"forward": tmp_path / f"forward{name}.csv", "decode": tmp_path / f"decode{name}.csv"}
    decode = ["--prompt-lens", "8", "--new-tokens", "4", "--modes", "eager"]
    grid = {"forward": ["--seq-lens", "8"], "decode": decode}
    for which, path in paths.items():
        assert main(["bench", which, *models, *GRID, *grid[which], "--out", str(path)]) == 0
    return paths


@pytest.fixture(scope="module")
def tapered_diverged(runs, tmp_path_factory):
    """Benchmark CSVs of the baseline, the diverged tapered run and DyT."""
    return _bench(tmp_path_factory.mktemp("bench"), runs["baseline"], runs["diverged"], runs["dyt"])


def test_benchmarks_time_the_others_and_name_the_diverged_run(tapered_diverged, runs):
    note = diverged(runs["diverged"]).not_timed()  # its wording: the first test
    for path in tapered_diverged.values():
        df = pd.read_csv(path, dtype={"skipped": str}).fillna({"skipped": ""})
        timed = df[df["skipped"] == ""]
        assert list(timed["variant"]) == ["baseline", "dyt"] and timed["speedup"].notna().all()
        skipped = df[df["skipped"] != ""]
        assert list(skipped["variant"]) == ["explicit", "folded"]
        assert (skipped["skipped"] == note).all() and skipped["speedup"].isna().all()
        printed = summary_table(df)  # what the command prints
        assert printed.endswith(f"NOT TIMED: {note}") and " 1 " in printed.splitlines()[2]


def test_tables_figure_and_claims_name_the_model_not_timed(tapered_diverged, runs, tmp_path):
    note = diverged(runs["diverged"]).not_timed()  # its wording: the first test
    forward, decode = tapered_diverged["forward"], tapered_diverged["decode"]
    inference_tables.make_bench_table("3", [forward], tmp_path / "table3")
    t3 = pd.read_csv(tmp_path / "table3.csv")
    ours = t3[(t3["B"] == 1) & (t3["T"] == 8)].iloc[0]
    assert ours["Folded (ours)"] == "not timed" and ours["Explicit scaling (ours)"] == "not timed"
    assert ours["Folded speedup IQR (ours)"] == "not timed" and ours["DyT (ours)"] != "not timed"
    assert note in (tmp_path / "table3.md").read_text()
    inference_tables.make_bench_table("decode", [decode], tmp_path / "table_decode")
    td = pd.read_csv(tmp_path / "table_decode.csv").iloc[0]
    assert td["Folded speedup (IQR)"] == "not timed" and "×" in td["DyT speedup (IQR)"]
    assert note in (tmp_path / "table_decode.md").read_text()
    paths = figure_speedups.make_fig5([decode], tmp_path / "fig5.pdf")
    assert f"Not timed.</strong> {note}." in paths[2].read_text() and paths[1].stat().st_size > 1000

    fold = tmp_path / "fold"
    for name, out in (("diverged", fold / "s0"), ("tapered", fold / "s1")):
        args = ["fold", "--model", str(runs[name]), "--data", _data(runs), "--out", str(out)]
        assert main([*args, "--windows", "2", "--eval-windows", "4"]) == 0
    out = tmp_path / "claims.md"
    verify = [str(fold / "s0" / "verify.json"), str(fold / "s1" / "verify.json")]
    untied = _relabel(runs["baseline"], tmp_path / "baseline_untied-d32-s0", "baseline_untied")
    args = ["claims", "--runs", str(runs["baseline"]), str(runs["dyt"]), str(runs["tapered"])]
    args += [str(untied)]
    args += ["--verify", *verify, "--bench", str(forward), str(decode), "--out", str(out)]
    assert main(args) == 0
    rows = {r["Claim"][:2]: r for r in jsonio.read_json(out.with_suffix(".json"))["claims"]}
    six = rows["6."]
    assert six["grade"] not in ("not judged", "not measured")  # the fold that ran
    assert (
        "1 model(s) not folded" in six["Ours"]
        and diverged(runs["diverged"]).reason() in six["Comment"]
    )
    assert {p["label"].split("/")[0] for p in six["parts"]} == {"internal_aux-d32-s1"}
    folded, not_folded = six["Scale"].removeprefix("models: ").split(" (not folded: ")
    assert (folded, not_folded) == ("internal_aux-d32-s1", "internal_aux-d32-s0)")
    seven = rows["7."]
    assert seven["grade"] == "not judged" and note in seven["Holds?"]
    dyt = next(r for r in rows.values() if r["Claim"].startswith("TaperNorm vs DyT"))
    assert f"speed: not timed ({note})" in dyt["Holds?"] and note in dyt["Comment"]


def _data(runs) -> str:
    return jsonio.read_json(runs["baseline"] / "config.json")["data"]["dir"]


def test_claim6_without_a_fold_that_ran_is_not_judged(runs, tmp_path):
    out = tmp_path / "fold"
    args = ["fold", "--model", str(runs["diverged"]), "--data", _data(runs), "--out", str(out)]
    assert main(args) == 0
    inp = claims.ClaimInputs(
        verify=[(out / "verify.json", claims.read_verify(out / "verify.json"))]
    )
    row = claims.claim6(inp)
    reason = diverged(runs["diverged"]).reason()
    assert row["grade"] == "not judged" and reason in row["Holds?"]
    measured = claims.CLAIMS[5].measure(inp)  # no fold ran: no verdict, the skip named
    assert isinstance(measured, NoVerdict) and measured.holds.grade == "not judged"
    assert reason in measured.comment


def test_a_diverged_dyt_or_baseline_run(runs, tmp_path):
    """DyT diverged: the baseline and the exports are timed, DyT named. The baseline diverged:
    nothing is timed (the speedups are over it), and every output still builds and says why."""
    dyt = _mark_diverged(runs["dyt"], tmp_path / "dyt-d32-s0", 7, 6)
    paths = _bench(tmp_path, runs["baseline"], runs["tapered"], dyt, "_dyt")
    df = inference_tables.load_bench([paths["forward"]])
    assert list(inference_tables.timed(df)["variant"]) == ["baseline", "explicit", "folded"]
    bad_dyt = diverged(dyt)
    assert (bad_dyt.label, bad_dyt.step) == ("DyT d32 s0", 7)
    assert inference_tables.skipped_notes(df) == [bad_dyt.not_timed()]

    base = _mark_diverged(runs["baseline"], tmp_path / "baseline-d32-s0", 5)
    paths = _bench(tmp_path, base, runs["tapered"], runs["dyt"], "_base")
    df = inference_tables.load_bench(list(paths.values()))
    assert inference_tables.timed(df).empty
    notes = inference_tables.skipped_notes(df)
    bad_base = diverged(base)
    assert (bad_base.label, bad_base.step) == ("Baseline d32 s0", 5)
    assert notes[0] == bad_base.not_timed()  # the baseline's own
    (over,) = notes[1:]  # the other models': their speedups are over it
    assert over.startswith("not timed") and bad_base.label in over and "step 5" in over
    df3, caption = inference_tables.table3(df)
    assert (df3["Folded (ours)"] == "not timed").all() and "Ours: nothing timed." in caption
    dec, caption = inference_tables.table_decode(df)
    assert dec.iloc[0]["Baseline tok/s"] == "not timed" and notes[0] in caption
    fig, caption = figure_speedups.fig5(df)
    assert notes[0] in caption
    record = claims.claims_record(
        claims.ClaimInputs(
            bench=inference_tables.timed(df), bench_skipped=inference_tables.skipped_notes(df)
        ),
        None,
        {},
    )
    assert record["claims"][6]["grade"] == "not judged"
    card = {r[""]: r["Ours"] for r in record["scale_card"]}
    bench_card = card["Inference benchmarks (claim 7)"]
    assert bench_card.startswith("nothing timed") and notes[0] in bench_card
