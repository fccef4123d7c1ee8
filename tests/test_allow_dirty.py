"""Results from code that differs from its commit: every command that writes results (a record, a
measurement, a summary, a table, a figure) is refused in one line before it starts
(provenance.writing_results, run by cli.main), unless --allow-dirty or TAPERNORM_ALLOW_DIRTY, which
the provenance then records; results and docs are not code; without git nothing is refused.

Each test clears TAPERNORM_ALLOW_DIRTY, which tests/conftest.py sets for the rest of the suite."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_run

from tapernorm.cli import build_parser, main
from tapernorm.runtime import provenance

ENV = provenance.ALLOW_DIRTY_ENV
SRC = Path(provenance.__file__).resolve().parents[1]  # this checkout's src/tapernorm


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _commit_all(repo):
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "c")


def _new_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    _git(path, "config", "user.email", "t@example.invalid")
    _git(path, "config", "user.name", "t")
    return path


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A committed scratch checkout in the project's layout, which this package takes for its own
    (provenance.code_root points into it); TAPERNORM_ALLOW_DIRTY cleared."""
    monkeypatch.delenv(ENV, raising=False)
    repo = _new_repo(tmp_path / "checkout")
    for name in ("src/tapernorm/__init__.py", "src/tapernorm/model.py", "README.md"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("x = 1\n")
    _commit_all(repo)
    monkeypatch.setattr(provenance, "code_root", lambda: repo / "src/tapernorm")
    return repo


def _tiny(shards_dir):
    return tiny_run(shards_dir, train={"steps": 2, "warmup_steps": 1})


def _train(cfg, out: Path, *flags: str) -> int:
    return main(["train", "--config-json", json.dumps(cfg.to_dict()), "--out", str(out), *flags])


def _provenance(out: Path) -> dict:
    return json.loads((out / "config.json").read_text())["meta"]["provenance"]


def test_dirty_code_is_refused_in_one_line_and_nothing_is_written(
    checkout, shards_dir, tmp_path, capsys
):
    (checkout / "src/tapernorm/model.py").write_text("x = 2\n")
    (checkout / "src/tapernorm/new.py").write_text("")
    commit = provenance.git_state()["commit"][:12]
    out = tmp_path / "run"
    assert _train(_tiny(shards_dir), out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err == (
        f"tapernorm train: error: the code differs from commit {commit} (src/tapernorm/model.py, "
        "src/tapernorm/new.py): commit it, or pass --allow-dirty (or set TAPERNORM_ALLOW_DIRTY=1) "
        "to write results from it, recorded as allow_dirty in their provenance\n"
    )
    assert not out.exists()


def test_allow_dirty_writes_and_the_provenance_says_so(checkout, shards_dir, tmp_path, capsys):
    (checkout / "src/tapernorm/model.py").write_text("x = 2\n")
    out = tmp_path / "run"
    assert _train(_tiny(shards_dir), out, "--allow-dirty") == 0
    made = _provenance(out)
    assert made["dirty"] is True and made["code_dirty"] is True and made["allow_dirty"] is True
    assert made["code_changed"] == ["src/tapernorm/model.py"]
    assert provenance.short_commit(made).endswith(" (dirty code, --allow-dirty)")
    assert ENV not in os.environ  # the flag holds for its command only
    assert _train(_tiny(shards_dir), tmp_path / "again") == 2


def test_the_environment_variable_allows_as_the_flag_does(
    checkout, shards_dir, tmp_path, monkeypatch
):
    (checkout / "src/tapernorm/model.py").write_text("x = 2\n")
    monkeypatch.setenv(ENV, "0")  # "0" (or empty) is not set
    assert _train(_tiny(shards_dir), tmp_path / "no") == 2
    monkeypatch.setenv(ENV, "1")
    assert _train(_tiny(shards_dir), tmp_path / "run") == 0
    assert _provenance(tmp_path / "run")["allow_dirty"] is True
    assert os.environ[ENV] == "1"


def test_results_and_docs_are_not_code(checkout, shards_dir, tmp_path):
    """New records under results/ and edited docs make the tree dirty, not its code: no refusal,
    and nothing says it was allowed."""
    (checkout / "results/cpu/runs/r1").mkdir(parents=True)
    (checkout / "results/cpu/runs/r1/eval.json").write_text("{}")
    (checkout / "README.md").write_text("changed\n")
    (checkout / "docs").mkdir()
    (checkout / "docs/usage.md").write_text("new\n")
    out = tmp_path / "run"
    assert _train(_tiny(shards_dir), out) == 0
    made = _provenance(out)
    assert made["dirty"] is True and made["code_dirty"] is False and made["code_changed"] == []
    assert "allow_dirty" not in made
    assert set(made["changed"]) == {" M README.md", "?? docs/", "?? results/"}


@pytest.mark.parametrize(
    "path, code",
    [
        ("src/tapernorm/model.py", True),
        ("workflow/rules/pretrain.smk", True),
        ("Snakefile", True),
        ("config/paper.yaml", True),
        ("pyproject.toml", True),
        ("requirements/constraints-cpu.txt", True),
        ("environment.yml", True),
        ("benchmarks/gpu_check.sh", True),
        ("results/cpu/scaling/summary.csv", False),
        ("config/README.md", False),
        ("docs/usage.md", False),
        ("README.md", False),
        ("tests/test_cli.py", False),
        ("notes.txt", False),
        ("Snakefile.bak", False),
        ("srcs/x.py", False),
    ],
)
def test_what_is_code(path, code):
    assert provenance.is_code(path) is code


def test_a_renamed_path_counts_on_both_sides(checkout, monkeypatch):
    _git(checkout, "mv", "src/tapernorm/model.py", "model.py")
    state = provenance.git_state()
    assert state["code_dirty"] is True and state["code_changed"] == ["src/tapernorm/model.py"]


def _installed(tmp_path: Path, where: Path) -> dict:
    """A copy of this package at `where`/tapernorm, imported from there in a fresh interpreter:
    its git_state and what `tapernorm stability summary` of no records says."""
    shutil.copytree(SRC, where / "tapernorm", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "TAPERNORM_COMMIT")}
    env["PYTHONPATH"] = str(where)
    code = (
        "import json, sys; from tapernorm.runtime import provenance as p; "
        "print(json.dumps({'file': p.__file__, 'state': p.git_state()})); "
        "from tapernorm.cli import main; "
        "sys.exit(main(['stability', 'summary', '--records', 'none', '--out', 'out']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    result = json.loads(done.stdout.splitlines()[0])
    assert Path(result["file"]).is_relative_to(where)
    return {**result, "stderr": done.stderr, "rc": done.returncode}


def test_without_git_the_commit_is_unknown_and_nothing_is_refused(tmp_path):
    """An installed package (no work tree around it): provenance says unknown; the command runs
    (and fails here on its missing records, not on the code)."""
    done = _installed(tmp_path, tmp_path / "site-packages")
    assert done["state"] == {"commit": "unknown", "dirty": None}
    assert done["rc"] == 2 and "differs from commit" not in done["stderr"]
    assert done["stderr"].startswith("tapernorm stability: error: run directory none")


def test_a_package_installed_inside_another_checkout_is_not_its_code(tmp_path):
    """A virtual environment inside some other dirty checkout (ignored there): that checkout's
    commit and changes are not this package's."""
    other = _new_repo(tmp_path / "project")
    (other / ".gitignore").write_text(".venv/\n")
    (other / "src").mkdir()
    (other / "src/mine.py").write_text("")
    _commit_all(other)
    (other / "src/mine.py").write_text("changed")
    done = _installed(tmp_path, other / ".venv/lib/site-packages")
    assert done["state"] == {"commit": "unknown", "dirty": None}
    assert "differs from commit" not in done["stderr"]


def test_the_package_in_a_dirty_checkout_refuses_in_a_fresh_interpreter(tmp_path):
    """The refusal end to end: this package committed in a scratch checkout (src/tapernorm), one
    of its modules changed, run from there in its own interpreter."""
    repo = _new_repo(tmp_path / "checkout")
    shutil.copytree(SRC, repo / "src/tapernorm", ignore=shutil.ignore_patterns("__pycache__"))
    _commit_all(repo)
    with open(repo / "src/tapernorm/fold.py", "a") as f:
        f.write("\n")
    done = _installed_run(tmp_path, repo / "src")
    assert done.returncode == 2 and not (tmp_path / "out").exists()
    assert done.stderr.startswith("tapernorm stability: error: the code differs from commit ")
    assert "(src/tapernorm/fold.py): commit it, or pass --allow-dirty" in done.stderr
    assert done.stderr.count("\n") == 1


def _installed_run(tmp_path: Path, src: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = str(src)
    argv = ["stability", "summary", "--records", "none", "--out", "out"]
    code = f"import sys; from tapernorm.cli import main; sys.exit(main({argv!r}))"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )


# Every command that writes results, with arguments that would fail on their inputs: the refusal
# comes first. (train is above, with a real run.)
WRITERS = [
    ["lr-grid", "--runs", "r", "--shared-lr", "0.001", "--out", "OUT"],
    ["eval", "--model", "m", "--data", "d", "--out", "OUT"],
    ["fold", "--model", "m", "--data", "d", "--out", "OUT"],
    ["export-hf", "--model", "m", "--out", "OUT"],
    ["taper-hf", "--model", "m", "--data", "d", "--out", "OUT"],
    ["probe", "m", "--data", "d", "--out", "OUT"],
    ["table", "2", "--runs", "r", "--out", "OUT"],
    ["figure", "fig2", "--runs", "r", "--out", "OUT"],
    ["tails", "--runs", "r", "--data", "d", "--out", "OUT"],
    ["claims", "--runs", "r", "--out", "OUT"],
    ["report-home", "--claims", "c.json", "--out", "OUT"],
    ["job-times", "records", "--out", "OUT"],
    ["manifest", "f", "--config-json", "{}", "--out", "OUT"],
    ["bench", "train-step", "--out", "OUT"],
    ["bench", "forward", "--random", "d64", "--out", "OUT"],
    ["bench", "decode", "--random", "d64", "--out", "OUT"],
    ["replay", "r", "--step", "1", "--out", "OUT"],
    ["scaling", "summary", "--records", "r", "--out", "OUT"],
    ["scaling", "figure", "fig_scaling_gaps", "--summary", "s.csv", "--out", "OUT"],
    ["stability", "summary", "--records", "r", "--out", "OUT"],
    ["stability", "factors", "--records", "r", "--out", "OUT"],
    ["gpu-report", "OUT"],
]


@pytest.mark.parametrize("argv", WRITERS, ids=lambda argv: " ".join(argv[:2]))
def test_every_writer_is_refused_before_it_starts(argv, checkout, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (checkout / "src/tapernorm/model.py").write_text("x = 2\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error: the code differs from commit" in err and err.count("\n") == 1
    assert not (tmp_path / "OUT").exists()


def _leaves(parser, prefix=()):
    """(command words, parser) of every command of the `tapernorm` parser."""
    actions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    if not actions:
        yield prefix, parser
        return
    for name, sub in actions[0].choices.items():
        yield from _leaves(sub, (*prefix, name))


# Commands with --out that write no result of this code: inputs (data), the machine's description,
# the environment's lock, and a copy of a finished run's files (which carry their own provenance).
NOT_RESULTS = {
    ("prepare-data",),
    ("prepare-eval",),
    ("rehearsal-inputs",),
    ("env",),
    ("lock-env",),
    ("scaling", "record"),
}


def test_every_command_with_an_out_is_checked_or_named_as_no_result():
    leaves = dict(_leaves(build_parser()))
    checked = {words for words, p in leaves.items() if p.get_default("writes_results")}
    with_out = {
        words for words, p in leaves.items() if any("--out" in a.option_strings for a in p._actions)
    }
    assert {tuple(argv[: 2 if argv[0] in ("bench", "scaling", "stability") else 1])
            for argv in WRITERS} | {("train",)} == checked  # fmt: skip
    assert with_out - checked == NOT_RESULTS


def test_the_workflow_refuses_dirty_code_before_its_first_job(tmp_path):
    """`snakemake` from a checkout whose code changed: one line, exit 1, no job run (common.smk's
    onstart); a dry run still plans."""
    root = SRC.parents[1]
    repo = _new_repo(tmp_path / "checkout")
    for name in ("Snakefile", "pyproject.toml"):
        shutil.copy(root / name, repo / name)
    for name in ("workflow", "config", "src/tapernorm"):
        shutil.copytree(root / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / ".gitignore").write_text(".snakemake/\n")
    _commit_all(repo)
    with open(repo / "workflow/rules/data.smk", "a") as f:
        f.write("# changed\n")
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = str(repo / "src")

    def snakemake(*args):
        return subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", "1", *args],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
        )

    assert snakemake("-n").returncode == 0
    done = snakemake()
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tapernorm: error: the code differs from commit ")
    assert "(workflow/rules/data.smk): commit it, or pass --allow-dirty" in last
    assert not (repo / "data").exists() and not (repo / "results").exists()
