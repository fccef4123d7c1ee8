"""The tails probe (tapernorm.probe, `tapernorm probe`): its statistics against direct
computations, the noise it adds, the residual search's budget and seed, the model directories it
loads, the verdict on a fine and a blown-up model, and taper-hf's probe of its export."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_hf_lm, tiny_run

from tapernorm import GPT, GPTConfig, set_gate
from tapernorm.cli import main
from tapernorm.data import TokenShards
from tapernorm.norms import taper_norms
from tapernorm.probe import (
    BatterySettings,
    SearchSettings,
    Thresholds,
    battery_inputs,
    judge,
    run_battery,
    search_residual,
)
from tapernorm.probe.stats import summary
from tapernorm.probe.windows import replace_tokens, replaced_count
from tapernorm.training.checkpoint import load_model, save_model
from tapernorm.training.loop import train

FAST = BatterySettings(max_windows=24, search=SearchSettings(budget=96, length=16))
CLI_FAST = ["--windows", "24", "--search-budget", "96", "--search-length", "16", "--device", "cpu"]


def tiny_model(taper: str = "all", seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig("llama", 2, 2, 32, 512, 32, taper=taper)).eval()


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as `tapernorm probe` on a CPU: bit-reproducible numbers (and on tiny
    models the fastest, above all on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def runs(shards_dir, tmp_path_factory):
    """Tiny trained runs: two baselines (seeds 0, 1) and an All-Taper (+aux) one, at g = 0."""
    root, threads = tmp_path_factory.mktemp("probe_runs"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, variant, seed in (("base0", "baseline", 0), ("base1", "baseline", 1)):
            train(tiny_run(shards_dir, variant=variant, seed=seed), root / name)
        train(tiny_run(shards_dir, variant="all_aux", train={"steps": 40}), root / "all_aux")
    finally:
        torch.set_num_threads(threads)
    return root


# ---- statistics --------------------------------------------------------------------------------


def test_summary_matches_numpy_and_counts_the_tail():
    values = np.random.default_rng(0).normal(5.0, 0.1, 1000)
    values[:7] = [11.0, 12.0, 30.0, 9.0, 10.5, 10.0, 10.01]  # 5 above 2 x 5.0 = 10 (10.0 is not)
    s = summary(torch.tensor(values), clean_median=5.0)
    assert s["n"] == 1000 and s["non_finite"] == 0
    assert s["mean"] == pytest.approx(values.mean(), rel=1e-12)
    for key, q in (("p50", 0.5), ("p99", 0.99), ("p99_9", 0.999)):
        assert s[key] == pytest.approx(np.quantile(values, q), rel=1e-12)
    assert s["max"] == 30.0 and s["above_2x_median"] == pytest.approx(5 / 1000)


def test_summary_counts_a_nan_as_infinite():
    s = summary([1.0, 2.0, float("nan"), 3.0], clean_median=1.0)
    assert s["non_finite"] == 1 and s["max"] == math.inf and s["mean"] == math.inf
    assert s["p50"] == 2.5 and s["p99"] == math.inf and s["above_2x_median"] == 0.5


# ---- the battery's inputs --------------------------------------------------------------------


def test_noise_replaces_the_stated_fraction_of_every_window():
    x = torch.randint(0, 512, (50, 128), generator=torch.Generator().manual_seed(1))
    noisy, mask = replace_tokens(x, 0.05, torch.Generator().manual_seed(0), vocab=512)
    k = round(0.05 * 128)
    assert k == replaced_count(0.05, 128) == 6
    assert (mask.sum(1) == k).all() and ((noisy != x) == mask).all()  # exactly k tokens change
    assert noisy.min() >= 0 and noisy.max() < 512
    again, _ = replace_tokens(x, 0.05, torch.Generator().manual_seed(0), vocab=512)
    other, _ = replace_tokens(x, 0.05, torch.Generator().manual_seed(1), vocab=512)
    assert torch.equal(noisy, again) and not torch.equal(noisy, other)
    pool = torch.tensor([3, 7])
    rare, mask = replace_tokens(x, 0.2, torch.Generator().manual_seed(0), pool=pool)
    assert (mask.sum(1) == 26).all() and set(rare[mask].tolist()) <= {3, 7}
    assert replaced_count(0.01, 32) == 1  # at least one token for a fraction above 0


def test_battery_inputs_keep_the_clean_targets(shards_dir):
    shards = TokenShards(shards_dir)
    inputs = battery_inputs(shards, 32, BatterySettings(max_windows=None))
    x, y = inputs.groups["clean"]
    all_x, all_y = shards.val_windows(None, 32)
    assert torch.equal(x, all_x) and torch.equal(y, all_y)  # every non-overlapping window
    for name in ("noise_1pct", "noise_5pct", "noise_20pct", "rare_5pct"):
        noisy, targets = inputs.groups[name]
        k = inputs.made[name]["tokens_replaced"]
        assert torch.equal(targets, y) and (noisy != x).sum(1).max() <= k, name
    assert ((inputs.groups["noise_5pct"][0] != x).sum(1) == 2).all()  # round(0.05 x 32)
    assert (inputs.groups["shifted"][0][0] == torch.from_numpy(
        shards.tokens("val")[16:48].astype(np.int64))).all()  # fmt: skip
    repeated = inputs.groups["repeated"][0]
    assert (repeated == repeated[:, :1]).all() and len(repeated) == 16


# ---- the battery -------------------------------------------------------------------------------


def test_battery_statistics_are_those_of_the_windows_losses(shards_dir):
    model, settings = tiny_model(), BatterySettings(max_windows=48, dtypes=("float32",))
    inputs = battery_inputs(TokenShards(shards_dir), 32, settings)
    result = run_battery(model, inputs, settings)
    x, y = inputs.groups["clean"]
    set_gate(model, 0.0)
    with torch.no_grad():
        logits, h = model(x, return_hidden=True)
    losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
    per_window = losses.double().mean(1).numpy()
    clean = result["fp32"]["clean"]["loss"]
    assert clean["n"] == len(x) and clean["max"] == pytest.approx(per_window.max(), rel=1e-5)
    assert clean["p99"] == pytest.approx(np.quantile(per_window, 0.99), rel=1e-5)
    assert clean["mean"] == pytest.approx(per_window.mean(), rel=1e-5)
    resid = h.double().pow(2).mean(-1).sqrt().max(1).values.numpy()
    assert result["fp32"]["clean"]["resid_rms"]["max"] == pytest.approx(resid.max(), rel=1e-5)
    first = losses[:, 0].double().numpy()
    assert result["fp32"]["first_position"]["loss"]["p50"] == pytest.approx(np.median(first))
    worst = result["fp32"]["clean"]["worst"]
    assert worst["window"] == int(per_window.argmax()) and len(worst["block_rms"]) == 3
    assert worst["block_rms"][-1] == pytest.approx(resid[worst["window"]], rel=1e-5)
    assert result["gate"] == 0.0 and "fp32" in result and "bf16" not in result


def test_a_model_that_predicts_nothing_has_log_vocab_everywhere(shards_dir):
    model = tiny_model()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # (tied: the embeddings too) every logit 0
    result = run_battery(model, battery_inputs(TokenShards(shards_dir), 32, FAST), FAST)
    for key in ("fp32", "bf16"):
        for group, entry in result[key].items():
            if group != "search":
                assert entry["loss"]["max"] == pytest.approx(math.log(512), rel=1e-6), group
                assert entry["loss"]["above_2x_median"] == 0.0


def test_the_gates_are_restored(shards_dir):
    model = tiny_model()
    set_gate(model, 0.5)
    run_battery(model, battery_inputs(TokenShards(shards_dir), 32, FAST), FAST, gate=0.0)
    assert {m.gate_value for _, m in taper_norms(model)} == {0.5} and not model.training


# ---- the residual search --------------------------------------------------------------------


def _search(model, seed, budget, suspects=()):
    gen = torch.Generator().manual_seed(5)
    prefixes = torch.randint(0, 512, (10, 16), generator=gen)
    start = torch.rand(10, generator=gen)
    settings = SearchSettings(budget=budget, length=16, restarts=4, candidates=8)
    return search_residual(model, prefixes, start, torch.tensor(suspects), 512, settings, seed)


def test_the_search_stays_within_its_budget_and_repeats_with_its_seed():
    model = tiny_model()
    set_gate(model, 0.0)
    forwarded = []
    hook = model.blocks[0].register_forward_pre_hook(lambda m, a: forwarded.append(len(a[0])))
    first = _search(model, seed=0, budget=100)
    assert sum(forwarded) == first["evals"] <= 100
    assert first["evals"] == 4 + 3 * 32  # the starts, then 3 rounds of 4 restarts x 8 ids
    forwarded.clear()
    assert _search(model, seed=0, budget=101)["evals"] == 100 == sum(forwarded)
    hook.remove()
    again, other = _search(model, seed=0, budget=100), _search(model, seed=1, budget=100)
    assert again == first and other["tokens"] != first["tokens"]
    with pytest.raises(ValueError, match="below its 4 restarts"):
        _search(model, seed=0, budget=3)


def test_the_search_finds_an_inflated_embedding_row():
    model = tiny_model()
    set_gate(model, 0.0)
    with torch.no_grad():
        model.tok_emb.weight[77] *= 1e4
    found = _search(model, seed=0, budget=200, suspects=[77, 78, 79])
    assert 77 in found["tokens"] and found["rms"] > 100


# ---- the verdict -----------------------------------------------------------------------------


def _battery(noisy_max: float, ratio: float) -> dict:
    entry = {"noise_5pct": {"loss": {"max": noisy_max}}, "search": {"ratio": ratio}}
    return {"fp32": entry, "bf16": entry}


def test_judge_names_each_check_past_its_limit():
    reference = _battery(4.0, 2.0)
    assert judge(_battery(7.9, 19.0), reference)["ok"]
    verdict = judge(_battery(8.1, 21.0), reference)
    assert verdict["failed"] == [
        "noise_5pct max window loss (fp32)",
        "residual search ratio (fp32)",
        "noise_5pct max window loss (bf16)",
        "residual search ratio (bf16)",
    ]
    assert not judge(_battery(float("nan"), 1.0), reference)["ok"]  # NaN counts as +inf
    assert judge(_battery(8.1, 1.0), reference, Thresholds(loss_ratio=3.0))["ok"]


# ---- loading model directories -----------------------------------------------------------------


def test_the_probe_loads_every_kind_of_model_directory(runs, shards_dir, tmp_path):
    from tapernorm.cli.probe import load_probe_model

    pytest.importorskip("transformers")
    run = runs / "all_aux"
    assert main(["fold", "--model", str(run), "--data", str(shards_dir), "--out",
                 str(tmp_path / "fold")]) == 0  # fmt: skip
    assert main(["export-hf", "--model", str(run), "--out", str(tmp_path / "hf")]) == 0
    x = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    reference = load_model(run)
    set_gate(reference, 0.0)
    with torch.no_grad():
        z = reference.eval()(x)
    kinds = {"run": run, "folded": tmp_path / "fold/folded", "scale": tmp_path / "fold/scaled"}
    kinds["Hugging Face llama"] = tmp_path / "hf"
    for kind, path in kinds.items():
        model, label = load_probe_model(path, "cpu")
        set_gate(model, 0.0)
        assert kind in label
        with torch.no_grad():
            assert torch.allclose(model.eval()(x), z, atol=1e-4, rtol=1e-4), kind
    with pytest.raises(ValueError, match=r"holds folded, scaled/: give one of them"):
        load_probe_model(tmp_path / "fold", "cpu")


# ---- the command -------------------------------------------------------------------------------


def probe(argv: list[str], capsys) -> tuple[int, str, str]:
    status = main(["probe", *argv, *CLI_FAST])
    out, err = capsys.readouterr()
    return status, out, err


def test_probe_passes_a_fine_model_and_writes_its_json(runs, shards_dir, tmp_path, capsys):
    out = tmp_path / "probe.json"
    argv = [str(runs / "base0"), "--reference", str(runs / "base1"), "--data", str(shards_dir)]
    status, text, err = probe([*argv, "--out", str(out)], capsys)
    assert status == 0 and "verdict: within thresholds" in text and "PAST" not in text, err
    result = json.loads(out.read_text())
    assert result["verdict"]["ok"] and len(result["verdict"]["checks"]) == 4
    assert result["model"]["fp32"]["noise_5pct"]["loss"]["n"] == 24
    assert result["thresholds"] == {"loss_ratio": 2.0, "search_ratio": 10.0}
    assert probe([*argv, "--out", str(out)], capsys)[0] == 0  # its own earlier output
    mine = tmp_path / "mine.json"
    mine.write_text('{"mine": 1}')
    status, _, err = probe([*argv, "--out", str(mine)], capsys)
    assert status == 2 and "is not an earlier output of tapernorm probe" in err
    assert mine.read_text() == '{"mine": 1}'


def test_probe_without_a_g1_needs_a_reference(runs, shards_dir, capsys):
    status, out, err = probe([str(runs / "base0"), "--data", str(shards_dir)], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and out == ""
    assert "has no TaperNorm layers" in lines[0] and "give --reference DIR" in lines[0]


def _blown_up(runs, tmp_path, change) -> str:
    model = load_model(runs / "all_aux")
    with torch.no_grad():
        change(model)
    save_model(model, tmp_path / "blown")
    return str(tmp_path / "blown")


def test_probe_fails_a_model_whose_final_scale_blew_up(runs, shards_dir, tmp_path, capsys):
    def scale_final_taper(model):  # g = 0 uses c * gamma_tilde; g = 1 (the reference) gamma
        model.ln_f.weight_tilde.mul_(1e4)

    blown = _blown_up(runs, tmp_path, scale_final_taper)
    written = tmp_path / "probe.json"
    status, out, err = probe([blown, "--data", str(shards_dir), "--out", str(written)], capsys)
    # golden: the rendered text (the verdict line of the report)
    assert status == 1 and "verdict: PAST thresholds: noise_5pct max window loss (fp32)" in out
    assert "tapernorm probe: past its thresholds: noise_5pct max window loss (fp32)" in err
    result = json.loads(written.read_text())
    assert not result["verdict"]["ok"]
    assert "noise_5pct max window loss (fp32)" in result["verdict"]["failed"]
    # no --reference: the same model at g = 1
    assert result["against"] == "the same model at g = 1" and result["reference"]["gate"] == 1.0
    assert result["model"]["gate"] == 0.0


def test_probe_fails_a_model_with_an_inflated_embedding_row(runs, shards_dir, tmp_path, capsys):
    counts = np.bincount(TokenShards(shards_dir).tokens("train"), minlength=512)
    rarest = int(np.flatnonzero(counts == counts[counts > 0].min())[0])

    def inflate(model):
        model.tok_emb.weight[rarest].mul_(1e4)

    blown = _blown_up(runs, tmp_path, inflate)
    written = tmp_path / "probe.json"
    status, out, err = probe([blown, "--data", str(shards_dir), "--out", str(written)], capsys)
    assert status == 1 and "residual search ratio (fp32)" in err.strip().splitlines()[-1]
    verdict = json.loads(written.read_text())["verdict"]
    assert "residual search ratio (fp32)" in verdict["failed"]
    [search] = [
        c
        for c in verdict["checks"]
        if (c["check"], c["dtype"]) == ("residual search ratio", "fp32")
    ]
    assert not search["ok"] and search["value"] > search["limit"]


# ---- taper-hf ------------------------------------------------------------------------------------


def test_taper_hf_probes_its_export(shards_dir, tmp_path, capsys):
    pytest.importorskip("transformers")
    import yaml

    tiny_hf_lm("llama", vocab=512).save_pretrained(tmp_path / "src")
    out = tmp_path / "out"
    args = ["--model", str(tmp_path / "src"), "--data", str(shards_dir), "--out", str(out)]
    assert main(["taper-hf", *args, "--steps", "8", "--batch-size", "4", "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)  # what the command prints
    probed = result["probe"]
    assert probed["model"]["windows"] == 32 and probed["block_size"] == 64
    assert probed["against"] == "the imported model at g = 1" and probed["reference"]["gate"] == 1
    assert {c["check"] for c in probed["verdict"]["checks"]} == {
        "noise_5pct max window loss",
        "residual search ratio",
    }
    card = (out / "hf" / "README.md").read_text()
    noisy = probed["model"]["fp32"]["noise_5pct"]["loss"]["max"]
    line = next(ln for ln in card.splitlines() if "5% of tokens random" in ln)
    assert f"{noisy:.4g} (fp32)" in line and "the imported model at g = 1" in line
    assert "- tails probe: " in card
    assert "tails_probe" not in yaml.safe_load(card.split("---\n")[1])["tapernorm"]
