"""export_hf: norm-free models written as stock Hugging Face checkpoints compute the same logits."""

import json
import os
import re
import stat

import pytest
import torch
from conftest import tiny_hf_lm, tiny_run

transformers = pytest.importorskip("transformers")

from tapernorm import GPT, GPTConfig, export_hf, load_hf, set_gate  # noqa: E402
from tapernorm.cli import main  # noqa: E402
from tapernorm.interop.hf_export import (  # noqa: E402
    EXPORT_EPS,
    VERIFY_KEYS,
    ExportError,
    ExportVerificationError,
    model_card,
    to_hf,
    verify_hf,
)
from tapernorm.norms import taper_norms  # noqa: E402
from tapernorm.training.checkpoint import save_model  # noqa: E402
from tapernorm.training.loop import train  # noqa: E402


def at_g0(model: GPT, seed: int = 0) -> GPT:
    """Random c, gamma_tilde (and beta) in every TaperNorm, gate 0."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, n in taper_norms(model):
            n.weight_tilde.copy_(0.5 + torch.rand(n.dim, generator=gen))
            n.c.fill_(0.5 + float(torch.rand((), generator=gen)))
            if n.bias is not None:
                n.bias.copy_(0.3 * torch.randn(n.dim, generator=gen))
    set_gate(model, 0.0)
    return model.eval()


def reloaded_logits(path, idx):
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        return hf, hf.eval()(idx).logits


def check_export(model: GPT, path, arch: str) -> dict:
    old = os.umask(0o022)
    try:
        report = export_hf(model, path)
    finally:
        os.umask(old)
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in path.iterdir()}
    assert modes["model.safetensors"] == 0o644 and set(modes.values()) == {0o644}, modes
    assert report["ok"] and report["greedy_match"] and report["argmax_agreement"] == 1.0
    assert report["rel_logit_diff"] <= 1e-4 and report["architecture"] == arch
    assert report["eps_rel_error_bound"] < 1e-12  # m / (2 eps): far below float32 roundoff
    print(f"{arch}: rel {report['rel_logit_diff']:.3g}, max m {report['norm_input_max_ms']:.3g}")
    idx = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator())
    hf, z = reloaded_logits(path, idx)
    assert type(hf).__name__ == arch
    with torch.no_grad():
        assert (model(idx) - z).abs().max() <= 1e-4 * z.abs().max()
    assert json.loads((path / "verify.json").read_text())["ok"]
    assert "Verification" in (path / "README.md").read_text()
    return report


@pytest.mark.parametrize(
    "kind,arch",
    [
        ("gpt2", "GPT2LMHeadModel"),
        ("llama", "LlamaForCausalLM"),
        ("mistral", "MistralForCausalLM"),
        ("qwen2", "Qwen2ForCausalLM"),
    ],
)
def test_imported_all_taper_exports_as_its_architecture(tmp_path, kind, arch):
    tiny_hf_lm(kind, tie_word_embeddings=kind != "llama").save_pretrained(tmp_path / "src")
    model = at_g0(load_hf(tmp_path / "src", taper="all"))
    check_export(model, tmp_path / "out", arch)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    eps = cfg["layer_norm_epsilon" if kind == "gpt2" else "rms_norm_eps"]
    assert eps == EXPORT_EPS and cfg["model_type"] == kind


@pytest.mark.parametrize(
    "style,tie,arch", [("llama", False, "LlamaForCausalLM"), ("gpt2", True, "GPT2LMHeadModel")]
)
def test_model_trained_here_exports_by_style(tmp_path, style, tie, arch):
    torch.manual_seed(0)
    kv = 2 if style == "llama" else 4
    cfg = GPTConfig(style, 2, 4, 64, 97, 32, taper="all", n_kv_head=kv, tie_embeddings=tie)
    check_export(at_g0(GPT(cfg)), tmp_path / "out", arch)


def test_a_real_norm_left_is_refused(tmp_path):
    internal = at_g0(GPT(GPTConfig("llama", 2, 4, 64, 97, 32, taper="internal")))
    with pytest.raises(ExportError, match=r"ln_f \(RMSNorm\) still normalize"):
        export_hf(internal, tmp_path / "a")
    tapering = at_g0(GPT(GPTConfig("gpt2", 2, 4, 64, 97, 32, taper="all")))
    set_gate(tapering, 0.5)
    with pytest.raises(ExportError, match="TaperNorm at gate 0.5"):
        export_hf(tapering, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_bias_the_architecture_lacks_is_refused(tmp_path):
    model = at_g0(load_hf(tiny_hf_lm("llama", attention_bias=True), taper="all"))
    with torch.no_grad():  # Llama with attention_bias has no MLP biases: ours are zeros
        model.blocks[0].mlp.w_in.bias.fill_(0.1)
    with pytest.raises(ExportError, match="mlp.w_in.bias is nonzero"):
        export_hf(model, tmp_path / "out")


def test_failed_verification_raises_and_keeps_the_report(tmp_path):
    model = at_g0(GPT(GPTConfig("llama", 1, 2, 32, 50, 16, taper="all")))
    with pytest.raises(ExportVerificationError, match="disagrees"):
        export_hf(model, tmp_path / "out", rtol=-1.0)
    assert not (tmp_path / "out").exists()
    assert not json.loads((tmp_path / "out.failed" / "verify.json").read_text())["ok"]


def test_cli_export_hf_on_a_run(shards_dir, tmp_path, capsys):
    train(tiny_run(shards_dir, variant="all_aux", train={"steps": 12}), tmp_path / "run")
    out = tmp_path / "hf"
    assert main(["export-hf", "--model", str(tmp_path / "run"), "--out", str(out)]) == 0
    report = json.loads((out / "verify.json").read_text())
    assert report["ok"] and report["rel_logit_diff"] <= 1e-4 and abs(report["loss_diff"]) < 1e-4
    assert (out / "tokenizer.model").is_file()  # the run's SentencePiece model
    card = (out / "README.md").read_text()
    assert "All-Taper (+aux)" in card and "steps: 12" in card
    front = _front_matter(card)
    meta = front["tapernorm"]
    assert meta["export_route"] == "tapernorm export-hf" and meta["export_check"].startswith(
        "passed"
    )
    assert "base_model" not in front and meta["base_model"].startswith("none:")  # no base model
    taper = json.loads((tmp_path / "run" / "config.json").read_text())["taper"]
    schedule = meta["taper_schedule"]  # the norms tapered, the gate's steps, the run's last step
    assert schedule.startswith("norms tapered: all;") and schedule.endswith("(12)")
    assert [int(n) for n in re.findall(r"step (\d+)", schedule)] == [taper["start"], taper["end"]]
    assert meta["fold_check"].startswith("not run by this route")

    save_model(GPT(GPTConfig("llama", 1, 2, 32, 50, 16, taper="internal")), tmp_path / "int")
    assert main(["export-hf", "--model", str(tmp_path / "int"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "tapernorm export-hf: error: export_hf:" in err and "ln_f (RMSNorm)" in err


def test_cli_taper_hf_end_to_end(shards_dir, tmp_path):
    tiny_hf_lm("llama", vocab=512).save_pretrained(tmp_path / "src")
    out = tmp_path / "out"
    args = ["--model", str(tmp_path / "src"), "--data", str(shards_dir), "--out", str(out)]
    assert main(["taper-hf", *args, "--steps", "8", "--batch-size", "4", "--lr", "1e-3"]) == 0
    assert json.loads((out / "fold_verify.json").read_text())["ok"]
    report = json.loads((out / "hf" / "verify.json").read_text())
    assert report["ok"] and report["architecture"] == "LlamaForCausalLM"
    run = json.loads((out / "run" / "config.json").read_text())
    assert run["init"]["from"].startswith("hf:") and run["model"]["taper"] == "all"
    meta = _front_matter((out / "hf" / "README.md").read_text())
    assert "base_model" not in meta  # a local directory is no Hub id
    assert meta["tapernorm"]["export_route"] == "tapernorm taper-hf"
    assert meta["tapernorm"]["fold_check"].startswith("passed: folded vs unfolded")
    assert meta["tapernorm"]["base_model"] == f"hf:{tmp_path / 'src'}"


def _front_matter(card: str) -> dict:
    import yaml

    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def _card_inputs() -> tuple[dict, dict]:
    report = {key: 0.5 for key in VERIFY_KEYS} | {"greedy_match": True, "argmax_agreement": 1.0}
    report |= {"architecture": "LlamaForCausalLM", "ok": True, "rtol": 1e-4, "rel_logit_diff": 2e-7}
    card = {
        "name": "taper-hf/tiny",
        "base model": "hf:gpt2",
        "hub id": "gpt2",
        "taper schedule": "norms tapered: all; gate g = 1 to step 2, cosine to g = 0 at step 6",
        "fold check": "passed: folded vs unfolded relative logit difference 1e-07 (rtol 0.001)",
        "export route": "tapernorm taper-hf",
    }
    return report, card


@pytest.mark.parametrize("hub", [True, False], ids=["huggingface_hub", "plain"])
def test_the_model_card_names_paper_base_model_schedule_fold_check_and_route(hub, monkeypatch):
    import sys

    if hub:
        pytest.importorskip("huggingface_hub")
    else:  # huggingface_hub not installed: the same card, written as plain text
        monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    report, card = _card_inputs()
    text = model_card(report, card)  # golden: the rendered text (the model card's lines)
    meta = _front_matter(text)
    assert meta["base_model"] == "gpt2" and meta["library_name"] == "transformers"
    assert "arxiv:2602.10408" in meta["tags"]
    assert meta["tapernorm"] == {
        "paper": "arXiv 2602.10408 (https://arxiv.org/abs/2602.10408)",
        "base_model": "hf:gpt2",
        "taper_schedule": card["taper schedule"],
        "fold_check": card["fold check"],
        "export_route": "tapernorm taper-hf",
        "export_check": "passed: relative logit difference 2e-07 (rtol 0.0001), greedy decoding "
        "identical: True",
    }
    body = text.split("---\n", 2)[2]
    assert body.startswith("\n# taper-hf/tiny: a norm-free LlamaForCausalLM\n")
    assert "[arXiv 2602.10408](https://arxiv.org/abs/2602.10408)" in body
    assert "- export route: tapernorm taper-hf" in body and "hub id" not in body


def test_both_card_routes_write_the_same_metadata_and_text(monkeypatch):
    pytest.importorskip("huggingface_hub")
    import sys

    report, card = _card_inputs()
    with_hub = model_card(report, card)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    plain = model_card(report, card)
    assert _front_matter(with_hub) == _front_matter(plain)
    assert with_hub.split("---\n", 2)[2] == plain.split("---\n", 2)[2]


def test_verify_leaves_the_stock_model_in_eval_mode():
    model = at_g0(load_hf(tiny_hf_lm("gpt2", resid_pdrop=0.5), taper="all"))
    hf = to_hf(model)  # GPT-2 with dropout: in train mode its greedy decoding would be random
    assert verify_hf(model, hf)["greedy_match"] and not hf.training
