"""The rehearsal of the paper path: its stand-ins load through the same loaders as real copies,
its outputs say REHEARSAL, and (slow) config/paper.yaml + config/rehearsal.yaml runs every job of
the paper DAG's rule set to the end."""

import json
import re
from pathlib import Path

import pytest
import yaml

from tapernorm.data import TINYSTORIES_FILES
from tapernorm.data.standins import GPT2_STANDINS, MARKER, make_standins
from tapernorm.runtime import provenance

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def standins(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("standins")
    make_standins(out, seed=0)
    return out


def test_standins_are_written_in_the_forms_users_supply(standins):
    record = json.loads((standins / MARKER).read_text())
    for files in TINYSTORIES_FILES.values():
        for name in files.values():
            text = (standins / "tinystories" / name).read_text()
            assert "\n<|endoftext|>\n" in text
    assert (standins / "openwebtext" / "openwebtext.jsonl").is_file()
    assert (standins / "pile" / "dataset_info.json").is_file()  # save_to_disk
    assert list((standins / "pile_filtered").glob("*.parquet"))
    for name in GPT2_STANDINS:
        assert (standins / name / "config.json").is_file()
        assert record["gpt2"][name]["params"] > 0
    sizes = [record["gpt2"][n]["params"] for n in GPT2_STANDINS]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)  # S < M < L < XL


def test_tinystories_versions_hold_different_stories(standins):
    v1, v2 = (
        set((standins / "tinystories" / f["train"]).read_text().split("<|endoftext|>"))
        for f in TINYSTORIES_FILES.values()
    )
    # disjoint plays: only stock chunks (a lone song line, "Exeunt") can recur in both
    assert len(v1 & v2) < 0.01 * min(len(v1), len(v2))  # a loader mixing them would be seen


def test_the_tinystories_standin_gives_the_chosen_version_only(standins):
    from tapernorm.data import tinystories_files

    for version, names in TINYSTORIES_FILES.items():
        files = tinystories_files(version, str(standins / "tinystories"))
        assert {split: path.name for split, path in files.items()} == names


def test_standins_are_fixed_by_the_seed(standins, tmp_path):
    make_standins(tmp_path, seed=0)
    for rel in ("openwebtext/openwebtext.jsonl", "gpt2/model.safetensors", MARKER):
        assert (tmp_path / rel).read_bytes() == (standins / rel).read_bytes(), rel


def test_the_paper_loaders_read_the_standins(standins, tmp_path):
    from tapernorm.data.evalsets import prepare_eval_set
    from tapernorm.data.hf_datasets import load_hf_text
    from tapernorm.data.prepare import HF_CORPORA

    docs = load_hf_text(HF_CORPORA["openwebtext"][0], "train", str(standins / "openwebtext"))
    assert len(docs) == json.loads((standins / MARKER).read_text())["openwebtext"]["documents"]
    for name in ("pile", "pile_filtered"):
        meta = prepare_eval_set(
            name, str(tmp_path / name), row_len=64, local_path=str(standins / name), max_rows=8
        )
        assert meta["n_rows"] == 8 and meta["row_len"] == 64


def test_a_gpt2_standin_loads_as_a_tapernorm_model_with_its_logits(standins):
    import torch
    from transformers import GPT2LMHeadModel

    from tapernorm import load_hf

    hf = GPT2LMHeadModel.from_pretrained(str(standins / "gpt2")).eval()
    ours = load_hf(str(standins / "gpt2")).eval()
    idx = torch.randint(
        0, hf.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        torch.testing.assert_close(ours(idx), hf(idx).logits, rtol=1e-4, atol=1e-4)


def test_a_rehearsal_stamp_says_so():
    state = {"commit": "0123456789abcdef", "dirty": False}
    plain = provenance.stamp("ab" * 32, state)
    marked = provenance.stamp("ab" * 32, state, rehearsal=True)
    assert "REHEARSAL" not in plain and marked.startswith("REHEARSAL") and marked.endswith(plain)


def test_rehearsal_tables_and_claims_are_marked(tmp_path):
    import pandas as pd

    from tapernorm.analysis.claims.document import write_claims
    from tapernorm.analysis.tables.write import write_table

    df = pd.DataFrame({"a": [1]})
    for rehearsal in (False, True):
        paths = write_table(df, tmp_path / f"t{rehearsal}", "caption", "ab" * 32, rehearsal)
        for path in paths:
            if path.suffix != ".csv":  # (data only)
                assert ("REHEARSAL" in path.read_text()) is rehearsal, path
        claims = write_claims(tmp_path / f"claims{rehearsal}.md", rehearsal=rehearsal)
        assert ("REHEARSAL" in claims.read_text()) is rehearsal
        assert json.loads(claims.with_suffix(".json").read_text())["rehearsal"] is rehearsal


def test_the_rehearsal_overrides_only_what_a_cpu_needs():
    """Every family, variant, width, protocol, evaluation set and benchmark mode of the paper
    config stays; GPT-2 L and XL still run on several processes (torchrun)."""
    paper = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    rehearsal = yaml.safe_load((ROOT / "config/rehearsal.yaml").read_text())
    assert rehearsal["rehearsal"]
    for family in ("pretrain", "ablation"):
        for key in ("variants", "widths", "figure_width"):
            assert key not in rehearsal[family], f"{family}.{key} must stay the paper's"
    assert set(rehearsal["pretrain"]["steps"]) == set(paper["pretrain"]["steps"])
    assert "protocols" not in rehearsal["finetune"] and "sets" not in rehearsal["finetune"]["eval"]
    models = {m["name"]: m for m in rehearsal["finetune"]["models"]}
    assert list(models) == [m["name"] for m in paper["finetune"]["models"]]
    for m in paper["finetune"]["models"]:
        assert (models[m["name"]]["gpus"] > 1) == (m["gpus"] > 1), m["name"]
        assert models[m["name"]]["paper"] == m["paper"]
    assert rehearsal["bench"]["decode"]["modes"] == paper["bench"]["decode"]["modes"]
    assert "anchor_sweep" not in rehearsal and "fold" not in rehearsal


@pytest.mark.slow
def test_the_paper_path_rehearsal_runs_every_job(tmp_path):
    """snakemake --configfile config/paper.yaml config/rehearsal.yaml: every job of the paper DAG's
    rule set (plus the stand-ins) finishes, and every table, figure, the claims and the report's
    home page say REHEARSAL."""
    import shutil

    from test_workflow import job_counts, snakemake

    for item in ("Snakefile", "workflow", "config"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    configs = ("--configfile", "config/paper.yaml", "config/rehearsal.yaml")
    paper = job_counts(snakemake(tmp_path, "-n", "--configfile", "config/paper.yaml").stdout)
    planned = job_counts(snakemake(tmp_path, "-n", *configs).stdout)
    assert set(planned) == set(paper) | {"rehearsal_inputs"}, set(planned) ^ set(paper)
    run = snakemake(tmp_path, "--cores", "2", *configs, check=False)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    done = re.findall(r"(\d+) of (\d+) steps \(100%\) done", log)
    assert done and done[-1][0] == done[-1][1] == str(sum(planned.values())), done[-1:]
    outputs = [
        *(tmp_path / "results/tables").glob("*.md"),
        *(tmp_path / "results/tables").glob("*.tex"),
        *(tmp_path / "results/tables").glob("*.html"),
        *(tmp_path / "figures").glob("*.html"),
        tmp_path / "results/claims.md",
        tmp_path / "results/claims.html",
        tmp_path / "results/report/home.rst",
    ]
    assert len(outputs) > 30
    unmarked = [str(p.relative_to(tmp_path)) for p in outputs if "REHEARSAL" not in p.read_text()]
    assert not unmarked
    assert json.loads((tmp_path / "results/claims.json").read_text())["rehearsal"] is True
