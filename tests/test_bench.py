"""Inference benchmarks on tiny models: row structure, verification, decode paths, tables, figure, claim.

No test asserts a timing: only that the numbers exist, are positive and are laid out as documented.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.figures import speedups as figure_speedups
from tapernorm.analysis.tables import inference as inference_tables
from tapernorm.bench.decode import DecodeCheckError, bench_decode, check_decode, greedy
from tapernorm.bench.forward import bench_forward
from tapernorm.bench.timing import Clock, paired_rounds
from tapernorm.bench.trust import paired_speedup
from tapernorm.bench.variants import (
    inference_variants,
    paper_config,
    random_dyt,
    random_variants,
    with_block_size,
)
from tapernorm.cli import main
from tapernorm.config import ConfigError
from tapernorm.decode import compile_kwargs, eager_decoder, static_decoder
from tapernorm.fold import FoldVerificationError
from tapernorm.model import GPT
from tapernorm.runtime.output_set import check_set
from tapernorm.training.checkpoint import save_model
from tapernorm.workflow import Plan, validate_pipeline_config

ENV_FIELDS = {"device", "device_name", "torch", "dtype", "mode", "threads", "params", "n_embd"}
CPU = torch.device("cpu")


def tiny_config(**kw):
    base = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=97, block_size=48)
    return paper_config(**{**base, **kw})


@pytest.fixture(scope="module")
def variants():
    return inference_variants(*random_variants(tiny_config(), seed=0))


@pytest.fixture(scope="module")
def forward_rows(variants):
    models, reference = variants
    return bench_forward_tiny(models, reference)


def bench_forward_tiny(models, reference):
    return bench_forward(models, (1, 2), (8, 16), warmup=1, iters=3, reference=reference)


@pytest.fixture(scope="module")
def decode_rows(variants):
    models, reference = variants
    return bench_decode(
        models, (1, 2), (4, 8), new_tokens=6, repeats=3, warmup=1, reference=reference
    )


def test_paired_rounds_interleave_and_ratio_medians():
    order, fake = [], {"a": [2.0, 2.0, 4.0], "b": [1.0, 2.0, 1.0]}

    def run(name):
        def call():
            order.append(name)
            return {"t": fake[name][sum(n == name for n in order) - 1]}

        return call

    times = paired_rounds({"a": run("a"), "b": run("b")}, rounds=3, warmup=0)
    assert order == ["a", "b", "b", "a", "a", "b"]  # each round starts one name later
    assert times == {"a": {"t": [2.0, 2.0, 4.0]}, "b": {"t": [1.0, 2.0, 1.0]}}
    assert paired_speedup(times["a"]["t"], times["b"]["t"]) == (2.0, 1.5, 3.0)


def test_random_variants_are_finite_and_exports_match(variants):
    models, reference = variants
    assert list(models) == ["baseline", "explicit", "folded"]
    x = torch.randint(0, 97, (2, 16))
    with torch.no_grad():
        z = reference(x)
        assert torch.isfinite(z).all()
        for name in ("explicit", "folded"):
            assert (models[name](x) - z).abs().max() <= 1e-5 * z.abs().max()


def test_forward_rows_are_well_formed(forward_rows):
    assert len(forward_rows) == 2 * 2 * 3
    for row in forward_rows:
        assert ENV_FIELDS <= set(row)
        assert row["benchmark"] == "forward" and row["mode"] == "eager"
        assert row["device"] == "cpu" and row["dtype"] == "float32"
        assert row["latency_ms"] > 0 and row["tok_s"] > 0 and row["rounds"] == 3
        assert math.isclose(row["tok_s"], row["batch"] * row["seq_len"] / row["latency_ms"] * 1e3)
        assert row["speedup_q1"] <= row["speedup"] <= row["speedup_q3"]
        if row["variant"] == "baseline":
            assert row["speedup"] == 1.0
    cells = {(r["batch"], r["seq_len"]) for r in forward_rows}
    assert cells == {(1, 8), (1, 16), (2, 8), (2, 16)}


def test_decode_rows_are_well_formed(decode_rows):
    assert len(decode_rows) == 2 * 2 * 3
    for row in decode_rows:
        assert ENV_FIELDS <= set(row)
        assert row["benchmark"] == "decode" and row["mode"] == "eager"
        assert row["prefill_ms"] > 0 and row["decode_ms"] > 0 and row["new_tokens"] == 6
        assert math.isclose(row["decode_tok_s"], row["batch"] * 6 / row["decode_ms"] * 1e3)
        assert row["check_rel_diff"] <= 1e-4
        if row["variant"] == "baseline":
            assert row["speedup"] == 1.0 and row["prefill_speedup"] == 1.0


def test_inputs_are_left_unchanged(variants):
    models, reference = variants
    before = {n: {k: v.clone() for k, v in m.state_dict().items()} for n, m in models.items()}
    bench_decode(models, (1,), (4,), new_tokens=2, repeats=1, warmup=0, reference=reference)
    for name, model in models.items():
        assert all(torch.equal(before[name][k], v) for k, v in model.state_dict().items())


def test_a_wrong_fold_stops_the_benchmark(variants):
    models, reference = variants
    broken = {**models, "folded": GPT(models["folded"].config).eval()}  # right shape, wrong weights
    with pytest.raises(FoldVerificationError):
        bench_forward_tiny(broken, reference)
    with pytest.raises(FoldVerificationError):
        bench_decode(broken, (1,), (4,), new_tokens=2, repeats=1, reference=reference)
    with pytest.raises(ValueError, match="reference"):
        bench_forward_tiny(models, None)


@pytest.mark.parametrize("style", ["llama", "gpt2"])
def test_static_decoder_equals_uncached_forward(style):
    torch.manual_seed(0)
    model = GPT(tiny_config(style=style, n_kv_head=1 if style == "llama" else None)).eval()
    prompt = torch.randint(0, 97, (3, 5))
    clock = Clock(CPU)
    with torch.inference_mode():
        assert check_decode(model, *static_decoder(model, 3, 12), prompt, 8, clock) <= 1e-5
        tokens, _, _ = greedy(*eager_decoder(model, 3, 12), prompt, 8, clock)
        assert torch.equal(tokens, model.generate(prompt, 8))
        static_tokens, _, _ = greedy(*static_decoder(model, 3, 12), prompt, 8, clock)
        assert torch.equal(static_tokens, tokens)


def test_check_decode_catches_a_wrong_position(variants):
    model = variants[0]["baseline"]
    prefill, step = eager_decoder(model, 1, 16)
    prompt = torch.randint(0, 97, (1, 6))
    with torch.inference_mode(), pytest.raises(DecodeCheckError):
        check_decode(model, prefill, lambda tok, pos: step(tok, pos + 1), prompt, 4, Clock(CPU))


def test_compiled_decoder_traces_as_one_graph(variants):
    """The compiled path's graph capture (fullgraph) with dynamo's eager backend: fast, no codegen."""
    model = variants[0]["folded"]
    torch._dynamo.reset()
    prefill, step = static_decoder(model, 2, 12, backend="eager")
    prompt = torch.randint(0, 97, (2, 5))
    with torch.inference_mode():
        assert check_decode(model, prefill, step, prompt, 6, Clock(CPU)) <= 1e-5


def test_compile_options_per_device():
    """CUDA graphs on a GPU, inductor's C++ wrapper on a CPU; the tests' trace-only backend: none."""
    assert compile_kwargs(torch.device("cuda"), "inductor") == {"mode": "reduce-overhead"}
    assert compile_kwargs(CPU, "inductor") == {"options": {"cpp_wrapper": True}}
    assert compile_kwargs(CPU, "eager") == {}


@pytest.mark.slow
def test_bench_decode_compiled_on_cpu(variants):
    models, reference = variants
    rows = bench_decode(
        models, (1,), (4,), new_tokens=4, repeats=2, warmup=1, compile=True, reference=reference
    )
    assert [r["mode"] for r in rows] == ["compiled"] * 3
    assert all(r["check_rel_diff"] <= 1e-4 and r["decode_tok_s"] > 0 for r in rows)


def run_script(name: str, args: list[str]) -> None:
    """Run benchmarks/NAME with `args` in a fresh interpreter; it must exit 0."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / name
    proc = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_generate_speed_script_writes_its_table(tmp_path):
    """benchmarks/generate_speed.py on a tiny model, eager only: the rows, the CSV and the markdown."""
    pytest.importorskip("transformers")
    args = ["--tiny", "--no-compiled", "--repeats", "2", "--warmup", "0", "--out", str(tmp_path)]
    run_script("generate_speed.py", args)
    df = pd.read_csv(tmp_path / "generate_speed.csv")
    assert list(df["impl"]) == ["transformers", "eager"] and df["same_tokens"].all()
    assert (df["tok_s"] > 0).all() and (df["floor_ratio"] > 0).all() and (df["rounds"] == 2).all()
    assert df["speedup_vs_transformers"].iloc[0] == 1.0 and df["n_embd"].iloc[0] == 32
    md = (tmp_path / "generate_speed.md").read_text()
    assert "| GPT.generate |" in md and "load average" in md and "GB/s" in md
    check_set(tmp_path / "generate_speed.set.json")  # the CSV and markdown written as one set


def test_step_linear_script_writes_its_table(tmp_path):
    """benchmarks/step_linear.py at one small width: a row per width, the CSV and the markdown."""
    run_script(
        "step_linear.py",
        ["--widths", "32", "--repeats", "2", "--batch", "2", "--out", str(tmp_path)],
    )
    df = pd.read_csv(tmp_path / "step_linear_b2.csv")
    assert list(df["n_embd"]) == [32] and (df["batch"] == 2).all()
    assert (df["layer_ms"] > 0).all() and (df["step_linear_ms"] > 0).all()
    assert df["speedup_q1"].iloc[0] <= df["speedup"].iloc[0] <= df["speedup_q3"].iloc[0]
    assert "| 32 |" in (tmp_path / "step_linear_b2.md").read_text()
    marker = tmp_path / "step_linear_b2.set.json"
    check_set(marker)  # the CSV and markdown written as one set
    assert set(json.loads(marker.read_text())["members"]) == {
        "step_linear_b2.csv",
        "step_linear_b2.md",
    }


def test_with_block_size_keeps_the_function():
    torch.manual_seed(1)
    model = GPT(tiny_config(block_size=16)).eval()
    longer = with_block_size(model, 40)
    x = torch.randint(0, 97, (2, 16))
    assert longer.config.block_size == 40 and with_block_size(model, 8) is model
    with torch.no_grad():
        assert torch.allclose(longer(x), model(x), atol=1e-6)
    with pytest.raises(ValueError, match="learned positions"):
        with_block_size(GPT(tiny_config(style="gpt2", block_size=16)), 40)


# ---- command line ---------------------------------------------------------------------------------


def test_cli_bench_forward_random(tmp_path, capsys):
    out = tmp_path / "forward.csv"
    args = ["bench", "forward", "--random", "d32", "--batch-sizes", "1", "--seq-lens", "8"]
    args += ["--repeats", "2", "--warmup", "0", "--device", "cpu", "--out", str(out)]
    assert main(args) == 0
    df = pd.read_csv(out)
    assert list(df["variant"]) == ["baseline", "explicit", "folded", "dyt"]  # random DyT too
    assert (df["n_embd"] == 32).all() and (df["vocab_size"] == 10000).all()
    assert df["source"].str.contains("random").all()


def test_cli_bench_decode_checkpoints_extend_the_context(tmp_path):
    baseline, tapered = random_variants(tiny_config(block_size=16), seed=2)
    save_model(baseline, tmp_path / "base")
    save_model(tapered, tmp_path / "taper")
    save_model(random_dyt(tiny_config(block_size=16), seed=2), tmp_path / "dyt")
    out = tmp_path / "decode.csv"
    args = ["bench", "decode", "--baseline", str(tmp_path / "base"), "--tapered"]
    args += [str(tmp_path / "taper"), "--batch-sizes", "1", "--prompt-lens", "12"]
    args += ["--new-tokens", "8", "--repeats", "2", "--warmup", "0", "--modes", "eager"]
    args += ["--out", str(out)]
    assert main([*args, "--dyt", str(tmp_path / "dyt")]) == 0
    df = pd.read_csv(out)
    assert list(df["variant"]) == ["baseline", "explicit", "folded", "dyt"]
    assert main(args) == 0  # without --dyt: the three columns as before
    df = pd.read_csv(out)
    assert len(df) == 3 and (df["mode"] == "eager").all()
    assert df["source"].str.contains("extended from 16 to 20").all()


def test_cli_bench_needs_models():
    assert main(["bench", "forward", "--device", "cpu"]) == 2


# ---- tables, figure, claim 7 ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench_csvs(forward_rows, decode_rows, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    compiled = [{**r, "mode": "compiled", "compile": "torch.compile"} for r in decode_rows]
    paths = {"forward": root / "forward.csv", "decode": root / "decode.csv"}
    calm = {"disturbed": False, "disturbed_why": ""}  # tiny cells are noisy: test_bench_trust
    forward = pd.DataFrame(forward_rows).assign(source="random weights", **calm)
    forward.to_csv(paths["forward"], index=False)
    pd.DataFrame(decode_rows + compiled).assign(**calm).to_csv(paths["decode"], index=False)
    return paths


def test_table3_has_the_paper_beside_ours(bench_csvs, tmp_path):
    paths = inference_tables.make_bench_table("3", [bench_csvs["forward"]], tmp_path / "table3")
    assert [p.suffix for p in paths] == [".csv", ".md", ".tex", ".html"]
    df = pd.read_csv(tmp_path / "table3.csv")
    assert {"Folded (ours)", "Folded (paper)", "Explicit scaling (paper)"} <= set(df.columns)
    assert len(df) == 4 + 6  # our four cells and the paper's six (no overlap at these sizes)
    paper_row = df[(df["B"] == 1) & (df["T"] == 256)].iloc[0]
    assert paper_row["Folded (paper)"] == "96.8 (1.22×)" and paper_row["Folded (ours)"] == "—"
    md = (tmp_path / "table3.md").read_text()
    assert "measured on a CPU at d=" in md.replace("Measured", "measured")
    paper_size = pd.read_csv(bench_csvs["forward"]).assign(n_embd=512, params=30_290_432)
    note = inference_tables.scale_note(paper_size)
    assert "at the paper's model size (d=512, 30M parameters" in note
    assert "eager" in note and "compiled step fuses the norm" in note and "different regime" in note
    assert "not on the paper's H100" in md and "float32" in md and "torch" in md
    assert r"$\times$" in (tmp_path / "table3.tex").read_text()


def test_decode_table_per_mode(bench_csvs, tmp_path):
    inference_tables.make_bench_table("decode", [bench_csvs["decode"]], tmp_path / "table_decode")
    df = pd.read_csv(tmp_path / "table_decode.csv")
    assert list(df["Mode"].unique()) == ["eager", "compiled"] and len(df) == 8
    assert "Folded speedup (IQR)" in df.columns
    md = (tmp_path / "table_decode.md").read_text()
    assert "1.18×" in md and "1.14×" in md and "CPU" in md


def test_fig5_compares_our_best_cell_with_the_papers_up_to(bench_csvs, tmp_path):
    df = inference_tables.load_bench([bench_csvs["decode"]])
    fig, caption = figure_speedups.fig5(df)
    assert [ax.get_title() for ax in fig.axes] == [
        "decode speedup, eager",
        "decode speedup, compiled",
    ]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "paper: Folded, up to 1.18× (black edge)" in labels
    assert "paper: Explicit scaling, up to 1.14× (black edge)" in labels
    assert labels.index("Folded") < labels.index("paper: Folded, up to 1.18× (black edge)")
    eager = fig.axes[0]
    ticks = [t.get_text() for t in eager.get_xticklabels()]
    assert ticks[-2:] == ["our best\ncell", "paper:\nup to"]
    # the paper's numbers are drawn only in their own column, not as lines across the cells
    assert not [
        ln for ln in eager.get_lines() if 1.14 in ln.get_ydata() and len(ln.get_xdata()) > 1
    ]
    best_x = eager.get_xticks()[-2]
    mine = df[(df["mode"] == "eager") & (df["variant"] == "folded")]
    best = mine["speedup"].max()
    drawn = [
        y
        for c in eager.containers
        for x, y in c.lines[0].get_xydata()
        if abs(x - best_x) < 0.5 and c.get_label() == "Folded"
    ]
    assert drawn == [pytest.approx(best)]  # the best cell: the largest per-cell median
    row = mine.loc[mine["speedup"].idxmax()]
    cell = f"Folded {best:.2f}× at B={int(row.batch)} P={int(row.prompt_len)}"
    assert cell in caption and "max against max" in caption
    paths = figure_speedups.make_fig5([bench_csvs["decode"]], tmp_path / "fig5_decode_speedup.pdf")
    assert [p.suffix for p in paths] == [".pdf", ".png", ".html"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert "max against max" in paths[2].read_text()


def test_bench_cli_tables_and_figure(bench_csvs, tmp_path):
    assert (
        main(["table", "3", "--bench", str(bench_csvs["forward"]), "--out", str(tmp_path / "t3")])
        == 0
    )
    assert (tmp_path / "t3.md").exists()
    fig = ["figure", "fig5", "--bench", str(bench_csvs["decode"]), "--out", str(tmp_path / "f.pdf")]
    assert main(fig) == 0 and (tmp_path / "f.png").exists()
    assert main(["table", "decode", "--out", str(tmp_path / "x")]) == 2  # needs --bench


def test_claim7_reads_the_bench_csvs(bench_csvs, tmp_path):
    row = claims.claim7(claims.ClaimInputs())
    assert row["Holds?"] == claims.NOT_MEASURED
    out = claims.write_claims(tmp_path / "claims.md", bench_files=list(bench_csvs.values()))
    text = out.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("| 7."))
    assert "forward: folded best" in line and "decode eager" in line and "decode compiled" in line
    assert "1.22×" in line and "a CPU" in line
    row7 = json.loads(out.with_suffix(".json").read_text())["claims"][6]
    assert row7["Claim"].startswith("7.") and row7["grade"] in claims.GRADES
    assert row7["grade"] != claims.NOT_MEASURED
    assert "- benchmark CSVs: 2" in text


# ---- the workflow's side: config -> command line ------------------------------------------------------


def test_pipeline_bench_section():
    root = Path(__file__).resolve().parents[1]
    schema = root / "workflow/schemas/config.schema.yaml"
    raw = yaml.safe_load((root / "config/ci.yaml").read_text())
    cfg = validate_pipeline_config(raw, schema)
    width = cfg["pretrain"]["widths"][0]
    assert Plan(cfg).bench.runs() == {
        "baseline": f"baseline-d{width}-s0",
        "internal_aux": f"internal_aux-d{width}-s0",
        "dyt": f"dyt-d{width}-s0",  # ci.yaml pre-trains dyt
    }
    # each benchmark job's section: the device and its own grid, not the other's
    decode = Plan({**cfg, "bench": {**cfg["bench"], "device": "cpu"}}).bench.job_config("decode")
    assert decode["device"] == "cpu" and "forward" not in decode
    assert {"prompt_lens", "modes", "new_tokens"} <= set(decode["decode"])
    forward = Plan(cfg).bench.job_config("forward")
    assert "seq_lens" in forward["forward"] and "decode" not in forward
    assert validate_pipeline_config({**raw, "bench": None}, schema)["bench"] is None
    defaults = validate_pipeline_config({**raw, "bench": {}}, schema)["bench"]
    assert defaults["decode"]["prompt_lens"] == [128, 512] and defaults["forward"]["repeats"] == 50
    no_aux = {**raw, "pretrain": {**raw["pretrain"], "variants": ["baseline", "all_aux"]}}
    no_aux["fold"] = {"variants": ["all_aux"]}
    with pytest.raises(ConfigError, match="config key bench"):
        validate_pipeline_config(no_aux, schema)
    gpt2 = {
        **raw,
        "pretrain": {**raw["pretrain"], "model": {**raw["pretrain"]["model"], "style": "gpt2"}},
    }
    gpt2["bench"] = {"decode": {"prompt_lens": [raw["pretrain"]["model"]["block_size"]]}}
    with pytest.raises(ConfigError, match="bench.forward.seq_lens|bench.decode"):
        validate_pipeline_config(gpt2, schema)
