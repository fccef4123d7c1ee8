"""The run manifest and its check, reference runs (tapernorm snapshot) and the README's and docs'
generated blocks (tapernorm docs), on small trees made here and on the repository itself."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import LOG

from tapernorm.artifact import doc_blocks, manifest, reference
from tapernorm.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_manifest_records_what_made_the_run_and_every_file(run_tree):
    m = manifest.read_manifest(run_tree / "results/manifest.json")
    assert m["root"] == ".." and len(m["files"]) == 6
    assert m["runs"] == {
        "count": 1,
        "first_started": "2026-12-01T23:56:10+00:00",
        "last_finished": "2026-12-01T23:58:00+00:00",
        "commits": ["a" * 40],
    }
    assert m["threads"]["training"] == [1] and m["config"]["pretrain"]["seeds"] == 1
    assert len(m["config_sha256"]) == 64 and m["made"]["host"]["cpu"]
    json.loads((run_tree / "results/manifest.json").read_text(), parse_constant=_no_constants)


def _no_constants(name):
    raise ValueError(f"non-standard JSON constant {name}")


def test_check_names_a_one_byte_edit_and_a_missing_file_and_passes_a_copy(run_tree, capsys):
    path = run_tree / "results/manifest.json"
    assert main(["check-manifest", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith("6 files match")
    copy = run_tree.parent / "copied"
    shutil.copytree(run_tree, copy)
    assert manifest.check_manifest(copy / "results/manifest.json") == (6, [])
    weights = copy / "results/runs/pretrain/baseline-d64-s0/model.safetensors"
    data = bytearray(weights.read_bytes())
    data[3] ^= 1  # one byte
    weights.write_bytes(bytes(data))
    (copy / "results/tables/table1.md").unlink()
    assert main(["check-manifest", str(copy / "results/manifest.json")]) == 1
    out = capsys.readouterr().out
    assert "changed: results/runs/pretrain/baseline-d64-s0/model.safetensors" in out
    assert "missing: results/tables/table1.md" in out and "4 files match, 2 do not" in out
    assert manifest.check_manifest(path, root=copy)[0] == 4  # --root: the tree lies elsewhere


def test_a_manifest_refuses_listed_files_that_do_not_exist(run_tree):
    with pytest.raises(manifest.ManifestError, match="do not exist"):
        manifest.write_manifest(run_tree / "m.json", ["nope.txt"], {}, {}, run_tree)
    (run_tree / "bad.json").write_text('{"format": "something else", "files": {}}')
    with pytest.raises(manifest.ManifestError, match="not a 'tapernorm manifest 1' file"):
        manifest.check_manifest(run_tree / "bad.json")


def test_host_slug():
    assert reference.host_slug("Intel(R) Xeon(R) Processor", 2) == "intel-xeon-2c"
    assert reference.host_slug("AMD EPYC 7B13 64-Core Processor", 2) == "amd-epyc-7b13-64-core-2c"


def test_snakemake_log_gives_the_wall_time(tmp_path):
    log = tmp_path / "x.snakemake.log"
    log.write_text(LOG)
    assert reference.log_wall(log) == {
        "started": "2026-12-01T23:56:03",
        "ended": "2026-12-02T00:20:55",
        "wall_seconds": 1492,
        "jobs": 2,
    }
    log.write_text(LOG.replace("2 of 2 steps (100%) done", "1 of 2 steps (50%) done"))
    with pytest.raises(reference.ReferenceError, match="not a finished run"):
        reference.log_wall(log)


def test_snapshot_keeps_the_summary_with_its_own_manifest_and_never_overwrites(run_tree):
    ref = reference.snapshot(run_tree / "results/manifest.json", conditions="a test")
    assert ref.parent == run_tree / "results/reference"
    made = manifest.read_manifest(run_tree / "results/manifest.json")["made"]
    expected = reference.host_slug(made["host"]["cpu"], made["host"]["cores"])
    expected += (
        "-" + made["commit"][:12] + ("-dirty" if made.get("code_dirty", made["dirty"]) else "")
    )
    assert ref.name == expected  # the host and the commit of the code that made the run
    kept = sorted(str(p.relative_to(ref)) for p in ref.rglob("*") if p.is_file())
    assert "results/runs/pretrain/baseline-d64-s0/model.safetensors" not in kept  # only hashed
    assert {"results/claims.json", "figures/fig_tails.png", "snakemake.log"} <= set(kept)
    assert manifest.check_manifest(ref / "manifest.json") == (len(kept) - 1, [])
    own = manifest.read_manifest(ref / "manifest.json")
    assert own["snapshot"]["snakemake"]["wall_seconds"] == 1492
    assert own["snapshot"]["conditions"] == "a test"
    with pytest.raises(reference.ReferenceError, match="never overwritten"):
        reference.snapshot(run_tree / "results/manifest.json")
    (run_tree / "results/claims.md").write_text("edited\n")
    with pytest.raises(reference.ReferenceError, match="differ from its manifest"):
        reference.snapshot(run_tree / "results/manifest.json", to=run_tree / "other")


def test_a_reference_run_is_named_dirty_by_its_code_not_its_results():
    """Uncommitted results (a study's records, a compile cache) leave the name clean; dirty code,
    or an old manifest that only says its tree was dirty, adds '-dirty'."""
    host = {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2}
    made = {"commit": "0123456789abcdef", "host": host}
    name = lambda **m: reference.reference_name({"made": {**made, **m}})  # noqa: E731
    assert name(dirty=True, code_dirty=False) == "intel-xeon-2c-0123456789ab"
    assert name(dirty=True, code_dirty=True) == "intel-xeon-2c-0123456789ab-dirty"
    assert name(dirty=True) == "intel-xeon-2c-0123456789ab-dirty"
    assert name(dirty=False) == "intel-xeon-2c-0123456789ab"


def test_generated_blocks_are_rendered_from_their_source_and_checked(run_tree):
    ref = reference.snapshot(run_tree / "results/manifest.json")
    rel = ref.relative_to(run_tree).as_posix()
    readme = run_tree / "README.md"
    marker = f"<!-- generated by `tapernorm docs`: results from {rel} -->"
    readme.write_text(f"# x\n\n{marker}\ntyped by hand\n{doc_blocks.END}\n\nafter\n")
    changed, seen = doc_blocks.sync_documents(run_tree, check=True)
    assert changed == [readme] and seen == 1
    assert doc_blocks.sync_documents(run_tree) == ([readme], 1)
    text = readme.read_text()
    assert "typed by hand" not in text and text.endswith(f"{doc_blocks.END}\n\nafter\n")
    assert "| 1 | Internal-Taper (+aux) within ~2% | d=64: +1.13% [+0.4%, +1.9%] | yes |" in text
    assert (
        "| — | TaperNorm vs DyT: ours | a \\| b | partly |" in text
    )  # the grade: claims.md has the rest
    assert f"]({rel}/figures/fig_tails.png)" in text and "took 24 min 52 s" in text
    assert doc_blocks.sync_documents(run_tree, check=True) == ([], 1)
    readme.write_text(text.replace("+1.13%", "+1.14%"))  # a number typed over
    assert main(["docs", "--check", "--repo", str(run_tree)]) == 1
    readme.write_text(text.replace("results from", "nonsense from"))
    with pytest.raises(reference.ReferenceError, match="unknown generated block kind"):
        doc_blocks.sync_documents(run_tree, check=True)


def test_the_repository_docs_equal_what_their_committed_runs_give():
    """Every number the README and docs quote from a run is generated from the committed run its
    block names: a block that differs (typed over, or its source changed) fails here."""
    changed, seen = doc_blocks.sync_documents(ROOT, check=True)
    assert seen >= 1, "no generated blocks: the README's results must be generated"
    assert changed == [], f"stale generated blocks in {changed}: run `tapernorm docs`"
    readme = (ROOT / "README.md").read_text()
    assert "<!-- generated by `tapernorm docs`: results from results/reference/" in readme


def test_a_readme_claim_row_is_its_headline_and_grade():
    row = {"Claim": "7. Folding speeds inference", "Ours": "forward: long; decode: long"}
    row |= {"Holds?": "partly (folded slower in 1/4 cells)", "grade": "partly"}
    short = doc_blocks._claim_cells({**row, "headline": "folded median 1.04× over 4 cells"})
    assert short == ["7", "Folding speeds inference", "folded median 1.04× over 4 cells", "partly"]
    old = {**row, "Ours": "main: 1.54x [context]; ablation: 2.75x (All-Taper 3.28x)"}
    assert doc_blocks._claim_cells(old)[2] == "ablation: 2.75x (All-Taper 3.28x)"  # no headline


def test_the_readmes_reference_run_is_the_code_at_head():
    """The README quotes a reference run of the code at HEAD: no file that can change a result
    differs between the run's commit and HEAD (else make a new reference run)."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    found = doc_blocks.BEGIN.search((root / "README.md").read_text())
    assert found and found["kind"] == "results"
    commit = reference.load_reference(root / found["source"])["manifest"]["made"]["commit"]
    assert reference.changed_since(commit, root) == []


def test_every_row_of_the_reference_run_prints_its_criterions_grading():
    """Each claim's grading is written once, on its Criterion, and every row of the README's
    reference run states it in its comment (measured or not judged alike)."""
    from tapernorm.analysis.claims.document import CLAIMS

    found = doc_blocks.BEGIN.search((ROOT / "README.md").read_text())
    rows = json.loads((ROOT / found["source"] / "results/claims.json").read_text())["claims"]
    assert len(rows) == len(CLAIMS)
    for claim, row in zip(CLAIMS, rows, strict=True):
        assert claim.criterion.grading in row["Comment"], row["Claim"]
        assert row["criterion"] == claim.criterion.to_dict(), row["Claim"]


def test_changed_since_names_result_paths_only(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "a")
    for name in ("src/tapernorm/model.py", "docs/x.md", "src/tapernorm/artifact/doc_blocks.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "b")
    assert reference.changed_since("HEAD~1", tmp_path) == ["src/tapernorm/model.py"]
    assert reference.changed_since("HEAD", tmp_path) == []
    with pytest.raises(reference.ReferenceError, match="git diff"):
        reference.changed_since("no-such-commit", tmp_path)


def test_claims_md_is_rendered_from_claims_json_alone():
    """A golden file of the rendered text: the README's reference run's claims.md is byte for byte
    what claims_markdown makes of its claims.json (the verdicts' grades, numbers and sentences
    are data there; only the renderer turns them into the page). A change of wording fails here
    until a new reference run records it."""
    from tapernorm.analysis.claims.document import claims_markdown

    found = doc_blocks.BEGIN.search((ROOT / "README.md").read_text())
    results = ROOT / found["source"] / "results"
    record = json.loads((results / "claims.json").read_text())
    assert claims_markdown(record) == (results / "claims.md").read_text()
    from tapernorm.analysis.claims.rows import GRADES

    for row in record["claims"]:  # each row's grade, recorded beside the cell that shows it
        assert row["grade"] in GRADES and row["Holds?"].startswith(row["grade"]), row["Claim"]
