"""`tapernorm job-times`: Snakemake's job records summed per rule and family."""

import pytest

from tapernorm.analysis.tables.job_times import (
    job_times_table,
    load_job_times,
    write_job_times,
)
from tapernorm.cli import main
from tapernorm.runtime.provenance import git_state, stamp

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def record(root, rel: str, *seconds: float):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{s}\t0:00:00\t1\t1\t1\t1\t0\t0\t0\t0\n" for s in seconds))


@pytest.fixture
def records(tmp_path):
    root = tmp_path / "job_records"
    record(root, "train/pretrain/baseline-d32-s0.tsv", 10.0)
    record(root, "train/pretrain/all_aux-d32-s0.tsv", 30.5)
    record(root, "train/ablation/baseline-d32-s0.tsv", 4.0)
    record(root, "finetune/vanilla-gpt2-d16.tsv", 7.0, 9.0)  # a repeated job: the mean
    record(root, "bench_forward.tsv", 2.0)
    return root


def test_times_per_rule_and_family(records):
    table, caption = job_times_table(*load_job_times(records))
    rows = {(r.Rule, r.Family): r for r in table.itertuples(index=False)}
    assert list(rows) == [
        ("bench_forward", ""),
        ("finetune", ""),
        ("train", "ablation"),
        ("train", "pretrain"),
        ("all", ""),
    ]
    pretrain = rows[("train", "pretrain")]
    assert tuple(pretrain)[2:] == (2, 40.5, 30.5, "all_aux-d32-s0")  # jobs, total, max, slowest
    assert rows[("finetune", "")][3] == 8.0
    everything = rows[("all", "")]
    assert everything.Jobs == 5 and everything[3] == 54.5
    assert everything[5] == "train/pretrain/all_aux-d32-s0"
    assert "not the pipeline's elapsed time" in caption and "without a record" not in caption


def test_only_the_named_jobs_and_the_absent_ones_counted(records):
    jobs = ["train/pretrain/baseline-d32-s0.tsv", records / "bench_forward.tsv", "finetune/x.tsv"]
    times, missing = load_job_times(records, jobs)
    assert sorted(times["rule"]) == ["bench_forward", "train"] and missing == ["finetune/x.tsv"]
    assert "1 job(s) without a record" in job_times_table(times, missing)[1]
    times, missing = load_job_times(records.parent / "none", ["train/a.tsv"])  # nothing ran yet
    assert times.empty and missing == ["train/a.tsv"]
    assert list(job_times_table(times, missing)[0]["Rule"]) == []


def test_bad_records_are_clear_errors(tmp_path, records):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_job_times(tmp_path / "nowhere")
    (records / "train/pretrain/broken.tsv").write_text("seconds\n1\n")
    with pytest.raises(ValueError, match="broken.tsv has no 's' column"):
        load_job_times(records)


def test_command_writes_the_table_or_prints_it(records, tmp_path, capsys):
    paths = write_job_times(records, tmp_path / "job_times.md")
    assert [p.suffix for p in paths] == [".csv", ".md", ".tex", ".html"]
    assert main(["job-times", str(records), "--out", str(tmp_path / "t" / "job_times")]) == 0
    md = (tmp_path / "t" / "job_times.md").read_text()
    assert md == paths[1].read_text() and "| train | pretrain | 2 | 40.5 | 30.5 |" in md
    assert capsys.readouterr().out.splitlines()[1].endswith("job_times.md")
    assert main(["job-times", str(records)]) == 0
    printed = capsys.readouterr().out
    assert md == f"{printed}\nMade by {stamp()}.\n"  # the files name what made them


def test_tables_name_the_commit_and_config_that_made_them(records, tmp_path):
    paths = write_job_times(records, tmp_path / "job_times", config_sha256="c" * 64)
    made = f"Made by tapernorm {git_state()['commit'][:12]}"
    md, tex, html = (p.read_text() for p in paths[1:])
    assert made in md and "config cccccccccccc" in md
    assert made in tex.splitlines()[-1] and tex.splitlines()[-1].startswith("% ")
    assert made in html
    assert "Made by" not in paths[0].read_text()  # the csv is data only
