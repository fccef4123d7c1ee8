"""Output sets (tapernorm.runtime.output_set): a command's several files are staged and moved in
together with a marker; a write stopped between members, or a member replaced by hand, is an
incomplete set in one line; whole sets pass. Tried on the set itself and on the writers that use
it (tables, tails' table and record, figures, the LR grid, the claims' readers)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from tapernorm.analysis.figures.style import save_figure
from tapernorm.analysis.figures.summary import fig_lr_grid
from tapernorm.analysis.report_home import write_home_page
from tapernorm.analysis.studies import lr_grid
from tapernorm.analysis.tables import training as tables
from tapernorm.runtime import output_set
from tapernorm.runtime.output_set import (
    IncompleteSet,
    OutputSet,
    check_member,
    check_set,
    marker_path,
    set_problems,
)


class Crash(Exception):
    """The process dying partway (a kill between two files)."""


def _write(directory: Path, texts: dict[str, str], command: str = "tapernorm test") -> list[Path]:
    out = OutputSet(marker_path(directory / "t"), command)
    for name, text in texts.items():
        out.add(directory / name, text.encode())
    return out.commit()


OLD = {"t.csv": "a\n1\n", "t.md": "old md\n", "t.json": '{"v": 1}\n'}
NEW = {"t.csv": "a\n2\n", "t.md": "new md\n", "t.json": '{"v": 2}\n'}


def _contents(directory: Path) -> dict[str, str]:
    return {name: (directory / name).read_text() for name in OLD}


@pytest.fixture
def crash_after(monkeypatch):
    """crash_after(fn_name, k): the k+1-th call of output_set's `fn_name` raises Crash."""

    def arm(name: str, k: int) -> None:
        real = getattr(output_set, name)
        calls = []

        def fake(*args, **kw):
            calls.append(args)
            if len(calls) > k:
                raise Crash(f"killed after {k}")
            return real(*args, **kw)

        monkeypatch.setattr(output_set, name, fake)

    return arm


def test_a_whole_set_passes_and_its_marker_names_every_member(tmp_path):
    paths = _write(tmp_path, OLD)
    assert [p.name for p in paths] == list(OLD)
    check_set(tmp_path / "t.set.json")
    for p in paths:
        check_member(p)
    record = output_set.read_marker(tmp_path / "t.set.json")
    assert set(record["members"]) == set(OLD)
    assert record["command"] == "tapernorm test"
    # the stamp is the content's: the same set written again gives the same marker
    before = (tmp_path / "t.set.json").read_bytes()
    _write(tmp_path, OLD)
    assert (tmp_path / "t.set.json").read_bytes() == before
    _write(tmp_path, NEW)
    assert output_set.read_marker(tmp_path / "t.set.json")["stamp"] != record["stamp"]
    assert sorted(os.listdir(tmp_path)) == sorted([*OLD, "t.set.json"])  # no staging left


@pytest.mark.parametrize("k", range(len(NEW) + 1))  # killed while staging member k (or the marker)
def test_a_crash_while_staging_leaves_the_old_set_whole(tmp_path, crash_after, k):
    _write(tmp_path, OLD)
    crash_after("atomic_write_bytes", k)
    with pytest.raises(Crash):
        _write(tmp_path, NEW)
    assert _contents(tmp_path) == OLD
    check_set(tmp_path / "t.set.json")


@pytest.mark.parametrize("had_old", [True, False])
@pytest.mark.parametrize(
    "k", range(len(NEW) + 1)
)  # killed after k members moved in (3: the marker)
def test_a_crash_between_members_is_an_incomplete_set(
    tmp_path, monkeypatch, crash_after, k, had_old
):
    if had_old:
        _write(tmp_path, OLD)
    crash_after("_move", k)
    with pytest.raises(Crash):
        _write(tmp_path, NEW)
    marker = tmp_path / "t.set.json"
    assert not marker.exists()
    assert set_problems(marker)  # the staging directory is left: the write did not end
    for name in OLD:
        if (tmp_path / name).exists():
            with pytest.raises(
                IncompleteSet, match=r"^.*t\.set\.json: the output set is incomplete"
            ):
                check_member(tmp_path / name)
    with pytest.raises(IncompleteSet) as e:
        check_set(marker)
    assert "\n" not in str(e.value) and "rerun tapernorm test" in str(e.value)
    # the next write removes the staging directory and leaves a whole set
    monkeypatch.undo()
    _write(tmp_path, NEW)
    check_set(marker)
    assert _contents(tmp_path) == NEW
    assert sorted(os.listdir(tmp_path)) == sorted([*NEW, "t.set.json"])


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: (d / "t.md").write_text("edited by hand\n"), "t.md is not the set's"),
        (lambda d: (d / "t.csv").write_text("a\n9\n"), "t.csv is not the set's"),
        (lambda d: (d / "t.json").unlink(), "t.json missing"),
        (lambda d: (d / "t.set.json").write_text("{}"), "not an output set's marker"),
    ],
)
def test_a_member_replaced_by_hand_is_named_in_one_line(tmp_path, change, said):
    _write(tmp_path, OLD)
    change(tmp_path)
    with pytest.raises(IncompleteSet) as e:
        check_set(tmp_path / "t.set.json")
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_set_from_before_markers_is_read_as_it_is(tmp_path):
    for name, text in OLD.items():
        (tmp_path / name).write_text(text)
    check_set(tmp_path / "t.set.json")
    check_member(tmp_path / "t.md")


def test_a_file_of_yours_at_the_markers_name_is_not_replaced(tmp_path):
    (tmp_path / "t.set.json").write_text("my notes\n")
    with pytest.raises(IncompleteSet, match="is not an output set's marker"):
        _write(tmp_path, NEW)
    assert (tmp_path / "t.set.json").read_text() == "my notes\n"
    assert not (tmp_path / "t.md").exists()


def test_members_must_lie_beside_the_marker(tmp_path):
    out = OutputSet(marker_path(tmp_path / "t"), "tapernorm test")
    with pytest.raises(ValueError, match="not in the directory"):
        out.add(tmp_path / "sub" / "t.md", b"x")


# ---- the writers -------------------------------------------------------------------------------


def _table(stem: Path, value: int) -> list[Path]:
    return tables.write_table(pd.DataFrame({"a": [value]}), stem, f"Caption {value}.")


def _figure(stem: Path, value: int) -> list[Path]:
    fig = Figure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [0, value])
    return save_figure(fig, stem.with_suffix(".pdf"), f"caption {value}")


def _grid(stem: Path, value: int) -> list[Path]:
    cell = {
        "variant": "baseline", "label": "Baseline", "lr": 0.001, "seeds": 1,
        "val_loss_mean": 3.0 + value, "val_loss_std": float("nan"), "diverged": 0,
        "val_losses": "3.0",
    }  # fmt: skip
    gap = {
        "variant": "all", "label": "All", "against": "Baseline", "gap_shared_pct": 1.0, "shared_lr": 0.001,
        "best_lr": 0.001, "baseline_best_lr": 0.001, "gap_best_pct": 1.0,
    }  # fmt: skip
    scale = {"n_embd": 64, "steps": 100, "seeds": [0]}
    return lr_grid.write_summary([cell], [gap], stem.parent, "tapernorm lr-grid", scale)


WRITERS = {
    "table": (_table, "table2", "tapernorm table"),
    "figure": (_figure, "fig1", "tapernorm figure"),
    "lr_grid": (_grid, "lr_grid", "tapernorm lr-grid"),
}


@pytest.mark.parametrize("kind", WRITERS)
def test_each_writer_writes_a_whole_set(tmp_path, kind):
    write, name, command = WRITERS[kind]
    paths = write(tmp_path / name, 1)
    marker = tmp_path / f"{name}.set.json"
    record = output_set.read_marker(marker)
    assert set(record["members"]) == {p.name for p in paths} and record["command"] == command
    check_set(marker)


@pytest.mark.parametrize("kind", WRITERS)
@pytest.mark.parametrize("k", [0, 1, 2])
def test_each_writer_killed_between_files_leaves_a_detectable_set(tmp_path, crash_after, kind, k):
    write, name, command = WRITERS[kind]
    paths = write(tmp_path / name, 1)
    old = {p: p.read_bytes() for p in paths}
    crash_after("_move", k)
    with pytest.raises(Crash):
        write(tmp_path / name, 2)
    moved = [p for p in paths if p.read_bytes() != old[p]]
    assert len(moved) <= k  # the rest still the old files
    with pytest.raises(IncompleteSet, match=f"rerun {command} to write it again"):
        check_member(paths[-1])


@pytest.mark.parametrize("kind", WRITERS)
def test_each_writers_member_replaced_by_hand_is_detected(tmp_path, kind):
    write, name, _ = WRITERS[kind]
    paths = write(tmp_path / name, 1)
    paths[0].write_bytes(paths[0].read_bytes() + b"\n")
    with pytest.raises(IncompleteSet, match=f"{paths[0].name} is not the set's"):
        check_member(paths[0])
    with pytest.raises(IncompleteSet, match=f"{paths[0].name} is not the set's"):
        check_set(tmp_path / f"{name}.set.json")
    check_member(paths[-1])  # its own content is the set's: a reader of it reads what was made


def test_tails_table_and_record_are_one_set(tmp_path, monkeypatch):
    from tapernorm.analysis.studies import tails

    monkeypatch.setattr(tails, "table_row", lambda r: {"model": r["name"], "x": r["x"]})
    monkeypatch.setattr(tails, "shown_row", lambda row: row)
    monkeypatch.setattr(tails, "caption", lambda header, rows: "Caption.")
    monkeypatch.setattr(tails, "arm_order", lambda r: r["name"])
    monkeypatch.setattr(tails, "restored", lambda row: (row, None))
    paths = tails.write_tails([{"name": "a", "x": 1}], tmp_path / "tt", {})
    record = output_set.read_marker(tmp_path / "tt.set.json")
    assert sorted(record["members"]) == sorted(p.name for p in paths)
    assert {p.suffix for p in paths} == {".csv", ".md", ".tex", ".html", ".json"}
    assert not (tmp_path / "tt.set.json").with_name("tt.set.json").is_dir()
    (tmp_path / "tt.json").write_text((tmp_path / "tt.json").read_text() + "\n")
    with pytest.raises(IncompleteSet, match=r"tt\.json is not the set's.*rerun tapernorm tails"):
        tails.read_rows(tmp_path / "tt.json")


def test_readers_refuse_an_incomplete_set(tmp_path):
    paths = _grid(tmp_path / "lr_grid", 1)
    fig_lr_grid(paths[-1])  # whole: read
    (tmp_path / "lr_grid.json").write_text((tmp_path / "lr_grid.json").read_text() + "\n")
    with pytest.raises(IncompleteSet, match=r"lr_grid\.json is not the set's"):
        fig_lr_grid(tmp_path / "lr_grid.json")
    claims = OutputSet(marker_path(tmp_path / "claims"), "tapernorm claims")
    claims.add(tmp_path / "claims.md", b"md\n")
    claims.add(tmp_path / "claims.json", b"{}\n")
    claims.commit()
    (tmp_path / "claims.json").write_text('{"claims": []}\n')  # another run's
    with pytest.raises(IncompleteSet, match="rerun tapernorm claims"):
        write_home_page(tmp_path / "claims.json", tmp_path / "index.rst", "snakemake")
    assert not (tmp_path / "index.rst").exists()


def _stability(directory: Path, value: int, monkeypatch) -> list[Path]:
    from tapernorm.analysis.studies import stability

    monkeypatch.setattr(stability, "summary_markdown", lambda s: f"# The stability study {value}\n")
    rows = pd.DataFrame({"width": [64], "arm": ["all_aux"], "label": ["All"], "clean": [value]})
    return stability.write_summary(stability.Summary(rows), directory, "made by")


def _scaling(directory: Path, value: int, monkeypatch) -> list[Path]:
    from tapernorm.analysis.studies import scaling_io

    monkeypatch.setattr(scaling_io, "summary_markdown", lambda *a: f"| Claim | {value}\n")
    monkeypatch.setattr(scaling_io, "passes_sentence", lambda *a: "")
    monkeypatch.setattr(scaling_io, "split_hosts_lines", lambda *a: [])
    summary = pd.DataFrame({"claim": ["x"], "width": [64], "gap": [value]})
    per_seed = pd.DataFrame({"claim": ["x"], "width": [64], "seed": [0], "gap": [value]})
    return scaling_io.write_summary(summary, per_seed, directory, "made by", corpus="c")


def _factors(directory: Path, value: int, monkeypatch) -> list[Path]:
    from tapernorm.analysis.studies import stability_factors

    rows = pd.DataFrame({"base": ["r"], "factor": ["none"], "change": [str(value)]})
    monkeypatch.setattr(stability_factors, "load_runs", lambda dirs: (None, []))
    monkeypatch.setattr(stability_factors, "factor_rows", lambda runs: rows)
    monkeypatch.setattr(stability_factors, "factor_markdown", lambda rows: f"{value}\n")
    return stability_factors.write_factor_table([], directory)


def _claims(directory: Path, value: int, monkeypatch) -> list[Path]:
    from tapernorm.analysis.claims import document as claims

    out = claims.write_claims(directory / "claims.md", extra_sections=[f"Note {value}."])
    return [out, out.with_suffix(".html"), out.with_suffix(".json")]


DIRECTORY_WRITERS = {
    "stability summary": (_stability, "summary", "tapernorm stability summary"),
    "scaling summary": (_scaling, "summary", "tapernorm scaling summary"),
    "stability factors": (_factors, "factors", "tapernorm stability factors"),
    "claims": (_claims, "claims", "tapernorm claims"),
}


@pytest.mark.parametrize("kind", DIRECTORY_WRITERS)
def test_summaries_and_claims_are_sets(tmp_path, monkeypatch, crash_after, kind):
    write, name, command = DIRECTORY_WRITERS[kind]
    paths = write(tmp_path, 1, monkeypatch)
    marker = tmp_path / f"{name}.set.json"
    assert set(output_set.read_marker(marker)["members"]) == {p.name for p in paths}
    check_set(marker)
    old = {p: p.read_bytes() for p in paths}
    crash_after("_move", 1)  # killed after the first file moved in
    with pytest.raises(Crash):
        write(tmp_path, 2, monkeypatch)
    assert [p for p in paths if p.read_bytes() != old[p]] == paths[:1]  # one new, the rest old
    for p in paths:
        with pytest.raises(IncompleteSet, match=f"rerun {command} to write it again"):
            check_member(p)


def test_claims_refuse_an_incomplete_summary(tmp_path, monkeypatch):
    from tapernorm.analysis.claims import document as claims

    _stability(tmp_path / "study", 1, monkeypatch)
    csv = tmp_path / "study" / "summary.csv"
    csv.write_text(csv.read_text() + "\n")
    with pytest.raises(IncompleteSet, match=r"summary\.csv is not the set's.*stability summary"):
        claims.write_claims(tmp_path / "claims.md", stability=tmp_path / "study" / "summary.csv")
    assert not (tmp_path / "claims.md").exists()


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_file_of_yours_at_a_markers_name_stops_the_command_before_any_work(
    tmp_path, capsys, force
):
    from tapernorm.cli import main

    (tmp_path / "claims.set.json").write_text("my notes\n")
    assert main(["claims", "--out", str(tmp_path / "claims.md"), *force]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "claims.set.json is in the way" in err and "move it away" in err
    assert (tmp_path / "claims.set.json").read_text() == "my notes\n"
    assert os.listdir(tmp_path) == ["claims.set.json"]  # nothing written


@pytest.mark.parametrize("kind", ["figure", "table", "tails", "scaling", "stability", "factors"])
def test_each_claim_check_covers_its_sets_marker(tmp_path, kind):
    from tapernorm.runtime import out_files
    from tapernorm.runtime.out_dirs import PathInUse

    stem, claim = {
        "figure": ("f", lambda: out_files.claim_figure(tmp_path / "f.pdf", True)),
        "table": ("t", lambda: out_files.claim_table(tmp_path / "t", "table", True)),
        "tails": ("t", lambda: out_files.claim_tails(tmp_path / "t", True)),
        "scaling": ("summary", lambda: out_files.claim_scaling_summary(tmp_path, [], True)),
        "stability": (
            "summary",
            lambda: out_files.claim_stability_summary(tmp_path, ["summary.md"], True),
        ),
        "factors": (
            "factors",
            lambda: out_files.claim_stability_summary(tmp_path, ["factors.md"], True),
        ),
    }[kind]
    claim()  # nothing in the way
    (tmp_path / f"{stem}.set.json").mkdir()
    with pytest.raises(PathInUse, match=rf"{stem}\.set\.json is in the way"):
        claim()


def test_an_lr_grid_killed_on_its_first_write_is_still_lr_grids_to_write_again(
    tmp_path, monkeypatch, crash_after
):
    from tapernorm.runtime.out_dirs import claim_dir, json_with

    crash_after("_move", 1)
    with pytest.raises(Crash):
        _grid(tmp_path / "lr_grid", 1)
    own = lambda out: json_with(out / "lr_grid.json", ("cells",))  # noqa: E731  (as lr-grid's)
    claim_dir(tmp_path, "lr-grid", own)  # its record moved in first: the directory is its own
    with pytest.raises(IncompleteSet, match="its write stopped"):
        check_member(tmp_path / "lr_grid.json")
    monkeypatch.undo()
    _grid(tmp_path / "lr_grid", 1)
    check_member(tmp_path / "lr_grid.json")


def test_the_next_write_removes_what_a_killed_one_staged_and_nothing_else(tmp_path):
    _write(tmp_path, OLD)
    marker = tmp_path / "t.set.json"
    left = tmp_path / ".t.set.json.0123abcd.staging"  # killed inside an atomic write while staging
    left.mkdir()
    (left / "t.csv").write_text("a\n2\n")
    (left / ".t.md.89abcdef.tmp").write_text("half")
    mine = (
        tmp_path / ".t.set.json.fedcba98.staging"
    )  # the same name pattern, holding a file of yours
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    check_set(marker)  # the old set is whole: its marker is there
    _write(tmp_path, NEW)
    assert not left.exists() and (mine / "notes.txt").read_text() == "mine"
    check_set(marker)


@pytest.mark.parametrize("block", ["scaling_block", "stability_block", "lr_grid_block"])
def test_the_docs_blocks_read_the_committed_studies_only_whole(tmp_path, block):
    import shutil

    from tapernorm.artifact import doc_blocks

    study, stem = {
        "scaling_block": ("scaling", "summary"),
        "stability_block": ("stability", "summary"),
        "lr_grid_block": ("lr_grid", "lr_grid"),
    }[block]
    committed = Path(__file__).resolve().parents[1] / "results" / "cpu" / study
    source = tmp_path / study
    source.mkdir()
    names = [p.name for p in committed.glob(f"{stem}.*") if not p.name.endswith(".set.json")]
    names += ["per_seed.csv"] if study == "scaling" else []
    for name in names:
        shutil.copy(committed / name, source / name)
    make = getattr(doc_blocks, block)
    text = make(source, tmp_path)  # a set from before markers: read as it is
    out = OutputSet(marker_path(source / stem), "tapernorm test")
    for name in names:
        out.add(source / name, (source / name).read_bytes())
    out.commit()
    assert make(source, tmp_path) == text  # whole: the same block
    read = source / ("lr_grid.json" if study == "lr_grid" else "summary.csv")  # what it reads
    read.write_text(read.read_text() + "\n")
    with pytest.raises(IncompleteSet, match=rf"{read.name} is not the set's"):
        make(source, tmp_path)
