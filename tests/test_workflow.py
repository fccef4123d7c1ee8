"""End-to-end: the Snakemake workflow on config/ci.yaml, the DAG's selectivity, lint, dry runs."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tapernorm.runtime import provenance
from tapernorm.workflow import validate_pipeline_config

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def snakemake(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a (dry) run: rule -> count."""
    table = output.split("Job stats:")[-1]
    return {
        m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A copy of the workflow (not the results) of this checkout."""
    wd = tmp_path_factory.mktemp("wf")
    shutil.copy(ROOT / "Snakefile", wd)
    shutil.copytree(ROOT / "workflow", wd / "workflow")
    shutil.copytree(ROOT / "config", wd / "config")
    return wd


@pytest.fixture
def clean(workdir, tmp_path) -> Path:
    """A copy of the workflow with nothing run yet (workdir may hold the CI run's outputs)."""
    out = tmp_path / "clean"
    ignore = shutil.ignore_patterns("results", "figures", "data", ".snakemake", "logs")
    shutil.copytree(workdir, out, ignore=ignore)
    return out


@pytest.fixture(scope="module")
def ci_run(workdir) -> Path:
    snakemake(workdir, "--cores", "2", "--configfile", "config/ci.yaml")
    return workdir


def test_ci_pipeline_builds_every_target(ci_run):
    for name in (
        "fig1_gate_schedule",
        "fig2_train_loss",
        "fig3_logit_norm",
        "fig4_grad_norms",
        "fig4b_ablation_grad_norms",
        "fig6_scale_anchor",
    ):
        for ext in ("pdf", "png", "html"):
            assert (ci_run / "figures" / f"{name}.{ext}").stat().st_size > 1000
    page = (ci_run / "figures/fig3_logit_norm.html").read_text()
    raw = yaml.safe_load((ci_run / "config/ci.yaml").read_text())
    cfg = validate_pipeline_config(raw, str(ROOT / "workflow/schemas/config.schema.yaml"))
    stamp = f"config {provenance.config_hash(cfg)[:12]}"  # the validated config's hash
    assert "<strong>Provenance.</strong> tapernorm " in page and stamp in page
    for n in (1, 2, 5):
        for ext in ("csv", "md", "tex"):
            assert (ci_run / "results/tables" / f"table{n}.{ext}").stat().st_size > 0
    claims = (ci_run / "results/claims.md").read_text()
    assert all(f"| {i}. " in claims for i in range(1, 9))
    for n in (4, 6):  # the GPT-2 fine-tuning family
        for ext in ("csv", "md", "tex"):
            assert (ci_run / "results/tables" / f"table{n}.{ext}").stat().st_size > 0
    assert "| 8. GPT-2 TaperLN fine-tuning" in claims
    verify = json.loads(
        (ci_run / "results/finetune/fold/all_taperln-gpt2-d16/verify.json").read_text()
    )
    assert verify["folded"]["ok"]
    scores = json.loads(
        (ci_run / "results/finetune/eval/all_taperln-gpt2-d16/heldout.json").read_text()
    )
    assert abs(scores["folded"]["loss_diff"]) < 1e-5
    export = ci_run / "results/export/all_taperln-gpt2-d16"  # a stock GPT2LMHeadModel
    verify = json.loads((export / "verify.json").read_text())
    assert verify["ok"] and verify["architecture"] == "GPT2LMHeadModel"
    assert (export / "model.safetensors").is_file() and (export / "README.md").is_file()
    verify = json.loads((ci_run / "results/fold/all_aux-d32-s0/verify.json").read_text())
    assert verify["folded"]["ok"] and verify["folded"]["rel_logit_diff"] <= 1e-5
    for name in ("table3", "table_decode"):  # inference benchmarks
        for ext in ("csv", "md", "tex"):
            assert (ci_run / "results/tables" / f"{name}.{ext}").stat().st_size > 0
    for ext in ("pdf", "png", "html"):
        assert (ci_run / "figures" / f"fig5_decode_speedup.{ext}").stat().st_size > 1000
    assert "measured on a cpu" in (ci_run / "results/tables/table3.md").read_text().lower()
    assert "| 7. Folding speeds inference" in claims
    run = ci_run / "results/runs/pretrain/internal_aux-d32-s1"
    for f in ("config.json", "model.safetensors", "metrics.jsonl", "eval.json"):
        assert (run / f).exists()
    records = ci_run / "results/job_records"  # Snakemake's job records (benchmark: files), summed
    assert (records / "train/pretrain/internal_aux-d32-s1.tsv").read_text().startswith("s\t")
    times = (ci_run / "results/tables/job_times.md").read_text()
    for row in (
        "train | pretrain | 16",
        "train | ablation | 6",
        "train | anchor_sweep | 2",
        "pretrain_finetune_base |  | 1",
        "finetune |  | 4",
        "bench_forward |  | 1",
        "bench_decode |  | 1",
        "tails |  | 1",
    ):
        assert f"| {row} | " in times
    assert "without a record" not in times
    tails = (ci_run / "results/tables/table_tails.csv").read_text().splitlines()
    assert len(tails) == 1 + 16 + 2  # every pre-training run at the figure width, the folded two
    assert (
        "all_aux-d32-s0, folded | All-Taper (+aux), folded |"
        in (ci_run / "results/tables/table_tails.md").read_text()
    )
    for ext in ("pdf", "png", "html"):
        assert (ci_run / "figures" / f"fig_tails.{ext}").stat().st_size > 1000


@pytest.fixture(scope="module")
def diverged_ci_run(tmp_path_factory) -> Path:
    """config/ci.yaml with an overlay under which every run with the scale loss diverges (lambda
    1e38 overflows it at the first step of the taper): both Internal-Taper (+aux) runs (the
    benchmarks' and figure 1's) and All-Taper (+aux), and the TaperLN fine-tuning runs; one seed,
    no ablation (nothing there diverges), run to `all`."""
    wd = tmp_path_factory.mktemp("wf_diverged")
    shutil.copy(ROOT / "Snakefile", wd)
    shutil.copytree(ROOT / "workflow", wd / "workflow")
    shutil.copytree(ROOT / "config", wd / "config")
    ci = yaml.safe_load((wd / "config/ci.yaml").read_text())
    models = [{**m, "lam": 1.0e38} for m in ci["finetune"]["models"]]
    overlay = {
        "pretrain": {"seeds": 1, "anchor": {"lam": 1.0e38}},
        "ablation": None,
        "anchor_sweep": None,
        "finetune": {"models": models},
    }
    (wd / "diverge.yaml").write_text(yaml.safe_dump(overlay))
    snakemake(wd, "--cores", "2", "--configfile", "config/ci.yaml", "diverge.yaml")
    return wd


def test_ci_pipeline_runs_to_the_end_past_diverged_runs(diverged_ci_run):
    wd = diverged_ci_run
    result = json.loads((wd / "results/runs/pretrain/internal_aux-d32-s0/eval.json").read_text())
    assert result["diverged"] and result["diverged_step"] > 0
    log = (wd / "logs/runs/pretrain/internal_aux-d32-s0.log").read_text()
    assert f"DIVERGED at step {result['diverged_step']}: weights rolled back to step" in log
    reason = f"run pretrain/internal_aux-d32-s0 diverged at step {result['diverged_step']}"
    verify = json.loads((wd / "results/fold/internal_aux-d32-s0/verify.json").read_text())
    assert verify["skipped"].startswith(reason)
    fold = wd / "results/finetune/fold/all_taperln-gpt2-d16"
    assert json.loads((fold / "verify.json").read_text())["skipped"].startswith(
        "run finetune/all_taperln-gpt2-d16 diverged at step"
    )
    scores = json.loads(
        (wd / "results/finetune/eval/all_taperln-gpt2-d16/heldout.json").read_text()
    )
    assert "skipped" in scores["folded"] and "val_loss" not in scores["folded"]
    export = wd / "results/export/all_taperln-gpt2-d16"
    assert [p.name for p in export.iterdir()] == ["verify.json"]
    note = f"Internal-Taper (+aux) d32 s0 diverged at step {result['diverged_step']}: not timed"
    for kind in ("forward", "decode"):
        bench = (wd / f"results/bench/{kind}.csv").read_text()
        assert bench.count(note) == 2  # explicit and folded; baseline and DyT timed
    for table in ("table3", "table_decode"):
        assert note in (wd / f"results/tables/{table}.md").read_text()
    assert note in (wd / "figures/fig5_decode_speedup.html").read_text()
    claims = json.loads((wd / "results/claims.json").read_text())["claims"]
    rows = {r["Claim"].split(" ")[0]: r for r in claims}
    assert rows["6."]["Holds?"].startswith(f"not judged: no fold ran ({reason}")
    assert rows["7."]["Holds?"] == f"not judged: the exports were not timed ({note})"
    assert note in rows["TaperNorm"]["Comment"]
    assert rows["1."]["Holds?"] == "no (d=32: every Internal-Taper (+aux) run diverged)"
    assert "internal_aux-d32-s0 at step" in (wd / "results/tables/table1.md").read_text()
    assert (
        "pretrain/internal_aux-d32-s0 at step" in (wd / "figures/fig3_logit_norm.html").read_text()
    )
    assert "diverged at step" in (wd / "results/tables/table4.md").read_text()
    tails = (wd / "results/tables/table_tails.md").read_text()  # its rolled-back weights measured
    assert f"internal_aux-d32-s0: diverged; the weights of step {result['weights_step']}" in tails
    assert f"internal_aux-d32-s0, folded: not measured: {reason}" in tails
    assert (wd / "results/manifest.json").is_file()


def test_html_report_holds_every_figure_and_table(ci_run):
    snakemake(ci_run, "--cores", "2", "--report", "report.html", "--configfile", "config/ci.yaml")
    html = (ci_run / "report.html").read_text(errors="replace")
    assert len(html) > 100_000 and "fig3_logit_norm.html" in html and "table2.html" in html
    assert "table_tails.html" in html and "fig_tails.html" in html
    assert "claims.html" in html
    # the home page: what made the run, the scale card and every verdict first
    home = html.split("The paper's claims, and whether they hold here", 1)
    assert len(home) == 2 and "The scale of these numbers" in home[0] and "Made by" in home[0]
    assert "1. Internal-Taper (+aux) validation loss within ~2% of the baseline" in home[1]
    for caption in (
        "Figure 1: (a) the TaperNorm layer",
        "Figure 3: mean logit",
        "Table 2</strong>",
    ):
        assert html.count(caption) == 1, caption  # each figure and table its own caption


def test_nothing_to_do_after_a_complete_run(ci_run):
    out = snakemake(ci_run, "-n", "--configfile", "config/ci.yaml").stdout
    assert "Nothing to be done" in out


def _changed_ci(ci_run: Path, name: str, section: str, key: str, value) -> str:
    """A copy of config/ci.yaml in the run's directory with `section`.`key` set to `value`."""
    cfg = yaml.safe_load((ci_run / "config/ci.yaml").read_text())
    node = cfg
    for part in section.split("."):
        node = node[part]
    node[key] = value
    (ci_run / name).write_text(yaml.safe_dump(cfg, sort_keys=False))
    return name


def _planned_train_runs(output: str) -> set[str]:
    """The run directories of the train jobs a dry run plans."""
    return set(re.findall(r"rule train:\n(?:\s+\w+: .*\n)*?\s+output: (\S+)/eval\.json", output))


AFTER_A_BENCHMARK = {"claims", "fig_claim_gaps", "job_times", "report_home", "manifest", "all"}


def test_a_bench_change_replans_only_the_benchmark_and_what_reads_it(ci_run):
    """The tables and figures of the training runs name the config's sha256 in their stamp, which
    is not a rerun trigger (common.smk, stamp_args); each benchmark's job gets its own grid."""
    forward = _changed_ci(ci_run, "forward.yaml", "bench.forward", "repeats", 4)
    counts = job_counts(snakemake(ci_run, "-n", "--configfile", forward).stdout)
    assert set(counts) == {"bench_forward", "table3", *AFTER_A_BENCHMARK}
    decode = _changed_ci(ci_run, "decode.yaml", "bench.decode", "new_tokens", 6)
    counts = job_counts(snakemake(ci_run, "-n", "--configfile", decode).stdout)
    assert set(counts) == {"bench_decode", "table_decode", "fig5", *AFTER_A_BENCHMARK}
    assert all(n == 1 for n in counts.values())


def test_a_pretrain_train_change_replans_the_pretraining_runs_and_what_reads_them(ci_run):
    lr = _changed_ci(ci_run, "lr.yaml", "pretrain.train", "lr", 2.0e-3)
    out = snakemake(ci_run, "-n", "--configfile", lr).stdout
    counts = job_counts(out)
    runs = _planned_train_runs(out)
    assert len(runs) == counts["train"] == 16 and all("/runs/pretrain/" in r for r in runs)
    assert counts["fold"] == 2 and {"bench_forward", "bench_decode"} <= set(counts)
    untouched = {
        "anchor_table",
        "fig4b_ablation_grad_norms",
        "fig6_scale_anchor",
        "fig7_anchor_sweep",
    }
    untouched |= {"finetune", "eval_finetune", "table4", "table6", "prepare_data"}
    assert not untouched & set(counts)  # the ablation's, the sweep's and the fine-tuning's


def test_deleting_one_run_rebuilds_only_it_and_its_dependants(ci_run):
    """Snakemake does not bring back a deleted intermediate by itself; `--forcerun` on the run's
    eval.json retrains that run alone and rebuilds exactly what depends on it."""
    shutil.rmtree(ci_run / "results/runs/pretrain/final-d32-s1")
    force = ("--forcerun", "results/runs/pretrain/final-d32-s1/eval.json")
    counts = job_counts(snakemake(ci_run, "-n", *force, "--configfile", "config/ci.yaml").stdout)
    assert counts.get("train") == 1 and "prepare_data" not in counts and "fold" not in counts
    figures = {rule for rule in counts if rule.startswith("fig")}  # one rule per figure
    assert counts.get("claims") == 1
    # fig_claim_gaps reads claims.json, fig_tails the tails battery's record (rule tails)
    assert figures == {"fig3_logit_norm", "fig4_grad_norms", "fig_claim_gaps", "fig_tails"}
    assert counts.get("tails") == 1
    assert counts.get("job_times") == 1  # the retrained run's time
    tables = {rule for rule in counts if rule.startswith("table")}  # one rule per table
    assert tables == {"table1", "table2", "table5"}  # not the fine-tuning or benchmark tables
    assert not {"bench_forward", "bench_decode", "finetune"} & set(counts)
    snakemake(ci_run, "--cores", "2", *force, "--configfile", "config/ci.yaml")
    assert (ci_run / "results/runs/pretrain/final-d32-s1/eval.json").exists()
    assert "Nothing to be done" in snakemake(ci_run, "-n", "--configfile", "config/ci.yaml").stdout


def test_one_figure_builds_only_the_runs_it_needs(clean):
    out = snakemake(clean, "-n", "figures/fig2_train_loss.pdf", "--configfile", "config/ci.yaml")
    counts = job_counts(out.stdout)
    assert counts == {
        "prepare_data": 1,
        "trunk": 2,
        "train": 10,
        "fig2_train_loss": 1,
    }  # baseline, internal_aux, all_aux, dyt, baseline_untied x 2 seeds; the first three of a
    # seed branch from its trunk


def test_benchmarks_need_the_three_runs_and_the_fold_check(clean):
    out = snakemake(
        clean, "-n", "figures/fig5_decode_speedup.pdf", "--configfile", "config/ci.yaml"
    )
    counts = job_counts(out.stdout)
    # the baseline's and Internal-Taper (+aux)'s seed 0 branch from their trunk
    assert counts == {
        "prepare_data": 1,
        "trunk": 1,
        "train": 3,
        "fold": 1,
        "bench_decode": 1,
        "fig5": 1,
    }
    assert "results/fold/internal_aux-d32-s0/verify.json" in out.stdout
    assert "results/runs/pretrain/dyt-d32-s0/eval.json" in out.stdout  # ci.yaml pre-trains dyt


def test_rule_runs_trains_every_row_of_the_sheet_and_nothing_else(clean):
    from tapernorm.workflow import read_config_files
    from tapernorm.workflow.plan import Plan
    from tapernorm.workflow.sheet import runs_sheet

    args = ("-n", "runs", "--configfile", "config/ci.yaml", "config/stability.yaml")
    out = snakemake(clean, *args).stdout
    schema = ROOT / "workflow/schemas/config.schema.yaml"
    raw = read_config_files([ROOT / "config/ci.yaml", ROOT / "config/stability.yaml"], schema)
    cfg = validate_pipeline_config(raw, str(schema))  # the files merged as the workflow merges them
    rows = runs_sheet(Plan(cfg))
    trunks = {r.trunk for r in rows if r.trunk}
    assert {r.family for r in rows} >= {"pretrain", "ablation", "stability"}
    assert job_counts(out) == {
        "prepare_data": 1,
        "trunk": len(trunks),
        "train": len(rows),
        "runs": 1,
    }
    planned = set(re.findall(r"wildcards: family=(\w+), run=(\S+)", out))
    assert planned == {(r.family, r.run) for r in rows}


def test_each_registered_output_is_made_by_its_rule(workdir):
    from tapernorm.workflow.outputs import OUTPUTS

    rules = set(snakemake(workdir, "--list-rules").stdout.split())
    assert {o.target for o in OUTPUTS} <= rules


def test_lint_is_clean(workdir):
    proc = snakemake(workdir, "--lint", check=False)
    assert "Lints for" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_snakefmt_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow/rules"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_config_errors_stop_the_workflow_naming_the_key(workdir, tmp_path):
    dup = tmp_path / "dup.yaml"  # Snakemake's own loader would keep the last `pretrain`
    dup.write_text("pretrain: {widht: [32]}\nfold: {rtol: 1.0e-5}\npretrain: {seeds: 1}\n")
    proc = snakemake(workdir, "-n", "--configfile", str(dup), check=False)
    assert proc.returncode != 0
    assert f"config file {dup}: invalid YAML at line 3, column 1: duplicate key 'pretrain'" in (
        proc.stdout + proc.stderr
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("ablation: {widht: [32]}\n")
    proc = snakemake(workdir, "-n", "--configfile", "config/ci.yaml", str(bad), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config key ablation.widht: unknown key" in out


def test_paper_config_plans_full_grid_with_gpus(workdir):
    out = snakemake(workdir, "-n", "-p", "--configfile", "config/paper.yaml").stdout
    counts = job_counts(out)
    # a --configfile replaces config/config.yaml: nothing of the CPU default carries over (its
    # taper start at 30% of the steps did, into every paper run, while Snakemake merged the two)
    runs = [json.loads(m) for m in re.findall(r"tapernorm train --config-json '(.*?)' --out", out)]
    runs = [r for r in runs if not r["name"].startswith("finetune/")]  # (Table 6's windows)
    assert len(runs) == counts["train"]
    for run in runs:
        assert run["taper"]["start"] == run["train"]["warmup_steps"], run["name"]
    # pre-training grid (six variants, DyT and its untied-head baseline), our ablation, lambda sweep
    assert counts["train"] == 8 * 4 * 6 + 6 * 3 + 4
    assert "results/runs/pretrain/all_aux-d512-s5/eval.json" in out
    train_jobs = [b for b in out.split("\n\n") if "rule train:" in b]
    assert train_jobs and all("gpu=1" in b for b in train_jobs)
    assert counts["bench_forward"] == counts["bench_decode"] == 1
    jobs = re.split(r"\n(?=rule \w+:)", out)  # one block per job, from its `rule` line
    bench_jobs = [b for b in jobs if b.startswith(("rule bench_forward:", "rule bench_decode:"))]
    assert len(bench_jobs) == 2 and all("gpu=1" in b for b in bench_jobs)
    assert "results/runs/pretrain/internal_aux-d512-s0/eval.json" in "".join(bench_jobs)
    # each figure is drawn at its family's width: the ablation's (d=64) are not the main runs'
    widths = dict(re.findall(r"tapernorm make (fig\d\w*?)_\w+ .*?--width (\d+)", out))
    assert widths["fig6"] == widths["fig4b"] == widths["fig7"] == "64"
    assert widths["fig3"] == widths["fig2"] == "512"


def test_paper_config_plans_gpt2_finetuning_with_table6_and_gpus(workdir):
    from tapernorm.analysis import paper

    out = snakemake(workdir, "-n", "-p", "--configfile", "config/paper.yaml").stdout
    counts = job_counts(out)
    # 4 models x (the paper's 3 protocols and FakeLN), each scored on 3 sets
    assert counts["finetune"] == 4 * 4 and counts["fold_finetune"] == 4
    assert counts["eval_finetune"] == 4 * 4 * 3 and counts["prepare_eval"] == 3
    assert "pretrain_finetune_base" not in counts  # the hub's GPT-2 models
    blocks = re.split(r"\n(?=\[[A-Z][a-z]{2} )", out)  # a job's block starts with its date
    jobs = [b for b in blocks if "rule finetune:" in b]
    assert len(jobs) == 16
    gpus = {"gpt2": 1, "gpt2-medium": 1, "gpt2-large": 2, "gpt2-xl": 4}
    seen = set()
    for job in jobs:
        run = json.loads(re.search(r"--config-json '(.*?)' --out", job)[1])
        model = run["meta"]["model"]
        ref = paper.TABLE6[model]
        assert (run["train"]["steps"], run["train"]["warmup_steps"]) == (ref.steps, ref.warmup_end)
        assert (run["taper"]["start"], run["taper"]["end"]) == (ref.taper_start, ref.taper_end)
        assert run["init"]["from"] == f"hf:{model}" and run["anchor"]["lam"] == ref.lam
        assert f"gpu={gpus[model]}," in job and "mem_mb=" in job
        assert ("torchrun" in job) == (gpus[model] > 1)
        seen.add(model)
    assert seen == set(paper.TABLE6)


@pytest.mark.skipif(
    importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
    reason="snakemake-executor-plugin-slurm not installed",
)
def test_slurm_profile_is_accepted(workdir):
    out = snakemake(
        workdir, "-n", "--profile", "workflow/profiles/slurm", "--configfile", "config/paper.yaml"
    ).stdout
    # the paper grid (144) with DyT and its untied-head baseline (48), our ablation (18) and its
    # lambda sweep (4)
    assert job_counts(out)["train"] == 214
