"""The documentation a reviewer opens: short README, links that resolve inside the repository."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    "README.md",
    "docs/usage.md",
    "docs/protocol.md",
    "docs/writing-paths.md",
    "docs/norm-free.md",
    "docs/reproducibility.md",
    "docs/scaling.md",
    "config/README.md",
    "benchmarks/README.md",
    "workflow/profiles/README.md",
]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_short_and_results_first():
    text = (ROOT / "README.md").read_text()
    assert len(text) <= 10_000  # a front page: claims.md and docs/ hold the details
    assert text.index("## Results") < text.index("## Run it") < text.index("## Details")
    assert "https://arxiv.org/abs/2602.10408" in text and "eprint        = {2602.10408}" in text


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve_inside_the_repository(doc):
    path = ROOT / doc
    for target in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        resolved = (path.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{doc} links outside the repository: {target}"
        if resolved.parent != ROOT / "docs/figures":  # (the next test)
            assert resolved.exists(), f"{doc} links to a missing file: {target}"


def test_writing_paths_names_every_command():
    """docs/writing-paths.md, what each command writes and does when the path is in use, has a row
    for every `tapernorm` command (and `bench`'s and `scaling`'s steps)."""
    from tapernorm.cli import build_parser

    def commands(parser, prefix=""):
        for name, sub in parser._subparsers._group_actions[0].choices.items():
            if sub._subparsers is not None:
                yield from commands(sub, f"{prefix}{name} ")
            else:
                yield prefix + name

    rows = [
        ln for ln in (ROOT / "docs/writing-paths.md").read_text().splitlines() if ln[:2] == "| "
    ]
    text = "\n".join(row.split(" | ")[0] for row in rows).replace("\\|", "|")
    missing = [c for c in commands(build_parser()) if not _named(c, text)]
    assert not missing, missing


def _named(command: str, text: str) -> bool:
    """Whether a table row's first cell names `command` (`bench train-step\\|forward` names all
    three benchmarks; a row may name several commands)."""
    head, _, last = command.rpartition(" ")
    return any(
        re.search(rf"`{re.escape(prefix)}[^`]*\b{re.escape(last)}\b", text)
        for prefix in ([f"{head} "] if head else [""])
    )


def test_readme_figures_are_those_of_the_committed_reference_run():
    figures = re.findall(r"\]\(([^)]+\.png)\)", (ROOT / "README.md").read_text())
    missing = [f for f in figures if not (ROOT / f).is_file()]
    elsewhere = [f for f in figures if not f.startswith("results/reference/")]  # (committed runs)
    assert figures and not missing and not elsewhere, (missing, elsewhere)


def test_ci_installs_the_readmes_torch():
    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("pip install torch=="))
    assert line.removeprefix("pip install ") in (ROOT / ".ci/run").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in line
    assert "torch==2.13.0" in (ROOT / "environment.yml").read_text()


def test_every_install_uses_the_lock():
    """The README's install line pins the lock; CI, conda's environment.yml and the rules' conda
    environments install with the same file."""
    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("pip install -c "))
    lock = "requirements/constraints-cpu.txt"
    assert line.split("#")[0].split() == ["pip", "install", "-c", lock, "-e", '".[dev]"']
    assert (ROOT / lock).is_file()
    assert f'pip install --quiet -c {lock} -e ".[dev]"' in (ROOT / ".ci/run").read_text()
    assert f"- -c {lock}" in (ROOT / "environment.yml").read_text()
    for env in ("tapernorm.yaml", "tapernorm-cuda.yaml"):
        assert f"- -c ../../{lock}" in (ROOT / "workflow/envs" / env).read_text()


def test_the_workflow_catalog_file_has_the_catalogs_keys_and_true_paths():
    import yaml

    usage = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert set(usage) == {"mandatory-flags", "software-stack-deployment"}
    assert set(usage["mandatory-flags"]) == {"desc", "flags"}
    assert "--cores" in usage["mandatory-flags"]["flags"]
    stack = usage["software-stack-deployment"]
    assert set(stack) == {"conda", "apptainer", "apptainer+conda", "report"}
    assert all(isinstance(v, bool) for v in stack.values())
    for path in re.findall(r"(?:config|workflow|requirements)/[\w./-]+\w", str(usage)):
        assert (ROOT / path).exists(), path
    if stack["conda"]:  # every rule (named, or made in a loop) names a conda environment
        for smk in (ROOT / "workflow/rules").glob("*.smk"):
            rules = re.split(r"(?m)^\s*rule\b[^\n]*:\s*$", smk.read_text())[1:]
            assert all("conda:" in rule for rule in rules), smk


SOURCE_PATH = re.compile(r"`((?:src|benchmarks|workflow)/[\w./-]+)`")


@pytest.mark.parametrize("doc", DOCS)
def test_source_paths_named_in_the_docs_exist(doc):
    """A file or directory of the code a document names in backticks (`src/tapernorm/fold.py`)
    exists: a module moved or renamed leaves no stale path behind."""
    text = (ROOT / doc).read_text()
    missing = [p for p in SOURCE_PATH.findall(text) if not (ROOT / p.rstrip(".")).exists()]
    assert not missing, f"{doc} names missing files: {missing}"


def test_where_things_are_names_files_that_exist():
    """docs/usage.md's table of where things are: in each row's file cell, the bare file names
    after the first path sit in that path's directory."""
    text = (ROOT / "docs/usage.md").read_text()
    section = text[text.index("## Where things are") :]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and "`src/" in ln]
    assert len(rows) > 25
    for row in rows:
        cell = row.rstrip(" |").rsplit(" | ", 1)[1]
        first = SOURCE_PATH.search(cell).group(1)
        base = ROOT / first if first.endswith("/") else (ROOT / first).parent
        for name in re.findall(r"`([\w]+\.py)`", cell):
            assert (base / name).exists(), f"{row}: {name}"


def test_the_job_times_block_leaves_a_cell_without_a_value_empty():
    """A rule with no family (the benchmarks) and the total row have empty cells in job_times.csv:
    the generated table shows them empty, not as pandas' `nan`."""
    from tapernorm.artifact.doc_blocks import job_times_block

    source = ROOT / "results/reference/amd-epyc-2c-82a57cc4f848"
    block = job_times_block(source, ROOT / "config")
    assert "nan" not in block
    assert "| bench_decode |  | 1 | 151.5 | 151.5 |  |" in block


def test_the_reference_times_block_compares_every_reference_runs_job_time_to_the_first():
    """Every committed reference run, oldest first: how it trained (the manifest's config), the
    conditions it ran under, and the total of its job records beside the first run's."""
    from tapernorm.artifact.doc_blocks import reference_times_block

    source = ROOT / "results/reference"
    block = reference_times_block(source, ROOT / "config")
    rows = [line for line in block.splitlines()[2:] if line.startswith("| [")]
    assert len(rows) == len([p for p in source.iterdir() if (p / "manifest.json").is_file()])
    assert rows[0].startswith("| [intel-xeon-2c-4ac9374d4b00]") and rows[0].endswith("(1.00x) |")
    before = next(r for r in rows if "amd-epyc-2c-486177f8b607" in r)
    after = next(r for r in rows if "amd-epyc-2c-82a57cc4f848" in r)
    assert "| compiled |" in before and "2,361 s (1.01x)" in before
    assert "| eager |" in after and "2,260 s (0.97x)" in after


def test_the_criteria_block_quotes_each_claims_criterion_from_the_reference_run():
    """The docs' criteria are the claims' declarations as a reference run recorded them: one row
    per claim, in claims.json's order, none typed into a document."""
    import json

    from tapernorm.artifact.doc_blocks import criteria_block

    source = ROOT / "results/reference/amd-epyc-2c-82a57cc4f848"
    record = json.loads((source / "results/claims.json").read_text())["claims"]
    rows = [line for line in criteria_block(source, ROOT / "docs").splitlines()[4:]]
    assert len(rows) == len(record)
    for line, claim in zip(rows, record, strict=True):
        assert line.endswith(f" | {claim['criterion']['text']} |"), line
    protocol = (ROOT / "docs/protocol.md").read_text()
    assert "<!-- generated by `tapernorm docs`: criteria from results/reference/" in protocol
