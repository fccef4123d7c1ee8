"""The pinned environment: the committed lock (requirements/constraints-cpu.txt), what a run's
provenance and manifest record of the installed distributions, and the warning when the running
environment differs from the reference's."""

import ast
import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tapernorm.artifact import manifest
from tapernorm.cli import main
from tapernorm.machine import env_lock
from tapernorm.runtime import provenance

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / env_lock.CONSTRAINTS
REFERENCES = sorted(ROOT.glob("results/reference/*/manifest.json"))


OPT_IN_EXTRAS = ("tensorboard",)  # not in .[dev], so not in the lock: installed by choice


def _declared() -> list[str]:
    """The canonical names of pyproject's dependencies, core and every extra a clean install of
    .[dev] brings (not the opt-in ones)."""
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11+)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    extras = [specs for name, specs in optional.items() if name not in OPT_IN_EXTRAS]
    specs = project["dependencies"] + [spec for extra in extras for spec in extra]
    return sorted({provenance.canonical_name(re.split(r"[<>=!~;\[ ]", s)[0]) for s in specs})


def _imported_modules() -> set[str]:
    """The top-level modules the package's source imports (at any depth of a function)."""
    found = set()
    for path in (ROOT / "src/tapernorm").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"tapernorm"}


def test_every_imported_package_is_declared():
    owners = metadata.packages_distributions()
    declared = set(_declared())
    undeclared = {
        module: owners.get(module)
        for module in sorted(_imported_modules())
        if not {provenance.canonical_name(d) for d in owners.get(module, [module])} & declared
    }
    assert undeclared == {}


def test_distributions_lists_every_installed_one_by_canonical_name():
    dists = provenance.distributions()
    assert dists["torch"].startswith("2.") and "pyyaml" in dists and "huggingface-hub" in dists
    assert list(dists) == sorted(dists)


def test_the_lock_pins_every_declared_dependency_and_the_reference_runs_versions():
    pins = env_lock.read_constraints(LOCK)
    assert [name for name in _declared() if name not in pins] == []
    assert "tapernorm" not in pins and "pip" not in pins
    assert "+" not in pins["torch"]  # torch==2.13.0 admits the CPU build and the CUDA one
    for ref in REFERENCES:  # the lock admits the reference run's versions (its CPU torch)
        record = json.loads(ref.read_text())
        recorded = env_lock.recorded_distributions(record)
        if _records_every_distribution(record):  # every pin was installed at that version
            assert env_lock.differences(pins, recorded) == []
        else:  # an older manifest: its headline versions are pinned at those versions
            assert recorded and env_lock.differences({k: pins[k] for k in recorded}, recorded) == []


def test_lock_text_round_trips_without_the_installer_and_the_project():
    dists = {"torch": "2.13.0+cpu", "PyYAML": "6.0.3", "pip": "26.3", "tapernorm": "0.1.0"}
    path_text = env_lock.lock_text(dists)
    assert "torch==2.13.0\n" in path_text and "pip==" not in path_text
    assert "tapernorm==" not in path_text


def test_the_warning_names_a_changed_version_and_both_versions(monkeypatch, tmp_path):
    lock = tmp_path / "constraints.txt"
    lock.write_text("# a comment\nnumpy==2.4.6\npandas==2.3.3\ntorch==2.13.0\n")
    installed = {"numpy": "2.4.6", "pandas": "2.3.3", "torch": "2.13.0+cpu", "extra": "1"}
    monkeypatch.setattr(env_lock, "distributions", lambda: dict(installed))
    assert env_lock.environment_warning(lock) is None  # a local label and extras are no difference
    installed["pandas"] = "3.1.1"
    del installed["numpy"]
    line = env_lock.environment_warning(lock)
    assert line == (
        f"this environment differs from {lock} in 2 distributions: numpy not installed "
        "(reference 2.4.6), pandas 3.1.1 (reference 2.3.3)"
    )
    assert "\n" not in line
    assert env_lock.environment_warning(tmp_path / "absent.txt") is None


def test_a_labelled_reference_version_matches_only_itself():
    ref = {"torch": "2.13.0+cpu"}
    assert env_lock.differences(ref, {"torch": "2.13.0+cpu"}) == []
    assert env_lock.differences(ref, {"torch": "2.13.0"}) == [
        env_lock.Difference("torch", "2.13.0+cpu", "2.13.0")
    ]


def test_the_warning_shows_a_few_and_counts_the_rest(tmp_path):
    found = [env_lock.Difference(f"p{i}", "1", "2") for i in range(env_lock.SHOWN + 3)]
    line = env_lock.warning_line(found, "ref")
    assert line.count("(reference 1)") == env_lock.SHOWN and "and 3 more" in line


def _manifest(tmp_path, dists: dict) -> Path:
    (tmp_path / "a.txt").write_text("a\n")
    out = tmp_path / "results/manifest.json"
    m = manifest.write_manifest(out, ["a.txt"], {"x": 1}, {}, tmp_path, {"c.yaml": "f" * 64})
    m["made"]["distributions"] = dists
    out.write_text(json.dumps(m))
    return out


def test_the_manifest_records_every_distribution_and_both_config_hashes(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    m = manifest.build_manifest(["a.txt"], {"x": 1}, {}, tmp_path, {"c.yaml": "f" * 64})
    assert m["made"]["distributions"] == provenance.distributions()
    assert m["config_file_sha256"] == {"c.yaml": "f" * 64}
    assert m["config_sha256"] == provenance.config_hash({"x": 1})
    assert manifest.build_manifest(["a.txt"], {}, {}, tmp_path)["config_file_sha256"] == {}


def test_check_manifest_warns_when_the_environment_differs(tmp_path, monkeypatch, capsys):
    path = _manifest(tmp_path, {"numpy": "2.4.6", "torch": "2.13.0+cpu"})
    monkeypatch.setattr(
        env_lock, "distributions", lambda: {"numpy": "2.4.6", "torch": "2.13.0+cpu"}
    )
    assert main(["check-manifest", str(path)]) == 0
    assert "differs" not in capsys.readouterr().err
    monkeypatch.setattr(
        env_lock, "distributions", lambda: {"numpy": "2.5.0", "torch": "2.13.0+cpu"}
    )
    assert main(["check-manifest", str(path)]) == 0  # a warning, not a failure
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"warning: this environment differs from {path} in 1 distributions: numpy 2.5.0 "
        "(reference 2.4.6)"
    ]


def _records_every_distribution(record: dict) -> bool:
    return isinstance(record["made"].get("distributions"), dict)


@pytest.mark.parametrize("ref", REFERENCES, ids=lambda p: p.parent.name)
def test_a_manifest_records_every_distribution_or_its_headline_versions(ref):
    record = json.loads(ref.read_text())
    recorded = env_lock.recorded_distributions(record)
    if _records_every_distribution(record):
        assert {"torch", "numpy", "pandas", "snakemake", "pyyaml"} <= set(recorded)
    else:
        assert set(recorded) == {"torch", "numpy", "pandas", "matplotlib"}


def test_check_env_lists_each_difference_and_fails(tmp_path, monkeypatch, capsys):
    lock = tmp_path / "constraints.txt"
    lock.write_text("numpy==2.4.6\npandas==2.3.3\n")
    monkeypatch.setattr(env_lock, "distributions", lambda: {"numpy": "2.4.6", "pandas": "2.3.3"})
    monkeypatch.setattr(provenance, "distributions", env_lock.distributions)
    assert main(["check-env", "--against", str(lock)]) == 0
    assert capsys.readouterr().out == f"{lock}: 2 distributions match\n"
    monkeypatch.setattr(provenance, "distributions", lambda: {"numpy": "2.4.6"})
    assert main(["check-env", "--against", str(lock)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "pandas not installed (reference 2.3.3)",
        f"{lock}: 1 distributions match, 1 differ",
    ]


def test_lock_env_writes_what_check_env_accepts(tmp_path, capsys):
    out = tmp_path / "lock.txt"
    assert main(["lock-env", "--out", str(out)]) == 0
    assert main(["check-env", "--against", str(out)]) == 0
    expected = {k for k in provenance.distributions() if k not in env_lock.NOT_LOCKED}
    assert set(env_lock.read_constraints(out)) == expected
