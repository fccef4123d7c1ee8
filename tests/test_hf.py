"""load_hf: tiny random HF GPT-2 / Llama / Mistral / Qwen2 models give the same logits and greedy
tokens as ours."""

import sys

import pytest
import torch
from conftest import tiny_hf_lm

transformers = pytest.importorskip("transformers")

from tapernorm.interop.hf_import import HFUnavailableError, load_hf  # noqa: E402
from tapernorm.norms import TaperNorm  # noqa: E402

VOCAB = 101


def _tiny_gpt2(**kw):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=64,
        vocab_size=VOCAB,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
        **kw,
    )
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # HF zero-inits biases and sets LN to identity: randomise them all
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _tiny_llama(n_kv=4, tie=True, **kw):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=n_kv,
        intermediate_size=172,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
        rope_theta=500000.0,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
        attn_implementation="eager",
        **kw,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # RMSNorm gains are ones by default: randomise them
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _tokens(batch=2, t=24, seed=1):
    return torch.randint(0, VOCAB, (batch, t), generator=torch.Generator().manual_seed(seed))


def _max_diff(ours, hf, idx):
    with torch.no_grad():
        return (ours(idx) - hf(idx).logits).abs().max().item()


@pytest.mark.parametrize("taper", ["none", "all"])
def test_gpt2_logits_match(tmp_path, taper):
    hf = _tiny_gpt2()
    hf.save_pretrained(tmp_path)
    idx = _tokens()
    for src in (hf, str(tmp_path)):
        ours = load_hf(src, taper=taper)
        assert not ours.training and ours.config.style == "gpt2"
        assert ours.config.tie_embeddings and ours.lm_head.weight is ours.tok_emb.weight
        assert _max_diff(ours, hf, idx) < 1e-4
    tapered = [m for m in ours.modules() if isinstance(m, TaperNorm)]
    assert len(tapered) == (5 if taper == "all" else 0)
    for m in tapered:  # the TaperLN conversion: gamma_tilde := gamma, gate 1
        assert torch.equal(m.weight_tilde, m.weight) and float(m.gate) == 1.0


@pytest.mark.parametrize("taper", ["none", "all", "internal"])
@pytest.mark.parametrize("n_kv,tie", [(4, True), (2, False)])
def test_llama_logits_match(tmp_path, n_kv, tie, taper):
    hf = _tiny_llama(n_kv=n_kv, tie=tie)
    hf.save_pretrained(tmp_path)
    idx = _tokens()
    for src in (hf, tmp_path):
        ours = load_hf(src, taper=taper)
        c = ours.config
        assert (c.style, c.n_kv_head, c.mlp_hidden, c.rope_theta) == ("llama", n_kv, 172, 5e5)
        assert c.tie_embeddings == tie and (ours.lm_head.weight is ours.tok_emb.weight) == tie
        assert _max_diff(ours, hf, idx) < 1e-4


def _rel_diff(ours, hf, idx):
    with torch.no_grad():
        z = hf(idx).logits
        return ((ours(idx) - z).abs().max() / z.abs().max()).item()


def _greedy(hf, idx, n):
    for _ in range(n):  # full forward passes: no generation config or cache involved
        with torch.no_grad():
            idx = torch.cat([idx, hf(idx).logits[:, -1:].argmax(-1)], dim=1)
    return idx


@pytest.mark.parametrize("kind", ["mistral", "qwen2"])
@pytest.mark.parametrize("taper", ["none", "all"])
def test_mistral_qwen2_logits_and_greedy_match(tmp_path, kind, taper):
    hf = tiny_hf_lm(kind, tie_word_embeddings=kind == "qwen2")
    hf.save_pretrained(tmp_path)
    ours = load_hf(tmp_path, taper=taper)
    c = ours.config
    assert (c.n_kv_head, c.qkv_bias, c.bias) == (2, kind == "qwen2", False)
    assert c.hf_config["model_type"] == kind and c.block_size == 64
    if kind == "qwen2":  # q/k/v biases only, and they are not zero
        assert (
            ours.blocks[0].attn.qkv.bias.abs().min() > 0 and ours.blocks[0].attn.proj.bias is None
        )
    assert _rel_diff(ours, hf, _tokens()) <= 1e-4
    prompt = _tokens(batch=1, t=8, seed=3)
    assert torch.equal(ours.generate(prompt, 16), _greedy(hf, prompt, 16))


def test_sliding_window_caps_block_size():
    # the window masks nothing within it: block_size becomes the window, and logits still match
    ours = load_hf(tiny_hf_lm("mistral", sliding_window=16))
    assert ours.config.block_size == 16
    hf = tiny_hf_lm("mistral", sliding_window=16)
    assert _rel_diff(ours, hf, _tokens(t=16)) <= 1e-4
    qwen = tiny_hf_lm("qwen2", use_sliding_window=True, sliding_window=16, max_window_layers=1)
    assert load_hf(qwen).config.block_size == 16
    assert load_hf(tiny_hf_lm("qwen2", sliding_window=16)).config.block_size == 64  # not in use


def test_llama_bias_mismatch_loads_zero_biases():
    hf = _tiny_llama(attention_bias=True, mlp_bias=False)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
    ours = load_hf(hf)
    assert ours.config.bias and not ours.blocks[0].mlp.w_in.bias.any()
    assert _max_diff(ours, hf, _tokens()) < 1e-4


def test_dtype():
    ours = load_hf(_tiny_llama(), dtype=torch.bfloat16)
    assert ours.tok_emb.weight.dtype == torch.bfloat16
    assert ours(_tokens()).dtype == torch.bfloat16


def test_llama_greedy_generate_matches_hf():
    hf = _tiny_llama(n_kv=2, tie=False)
    hf.generation_config.eos_token_id = None  # never stop early
    hf.generation_config.pad_token_id = 0
    ours = load_hf(hf)
    idx, n = _tokens(batch=1, t=8, seed=3), 20
    mask = torch.ones_like(idx)
    theirs = hf.generate(idx, attention_mask=mask, do_sample=False, max_new_tokens=n)
    mine, logits = ours.generate(idx, n, return_logits=True)
    assert theirs.shape == mine.shape == (1, 8 + n)
    top2 = logits.topk(2, dim=-1).values  # the argmaxes are well separated, so this is robust
    assert (top2[..., 0] - top2[..., 1]).min() > 1e-3
    assert torch.equal(mine, theirs)


def test_hub_id_offline_raises_quickly(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HFUnavailableError, match="save_pretrained") as e:
        load_hf("definitely-not-a-local-dir/tiny-model-xyz")
    assert "definitely-not-a-local-dir/tiny-model-xyz" in str(e.value)


def test_hub_unreachable_without_offline_flag(monkeypatch):
    import huggingface_hub.constants

    import tapernorm.interop.hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(tapernorm.interop.hub, "reachable", lambda: False)  # no network touched
    with pytest.raises(HFUnavailableError, match="unreachable"):
        load_hf("gpt2-definitely-not-cached-xyz")


@pytest.mark.parametrize("path", ["./missing-dir", "/nonexistent/ckpt", "a/b/c", "~/ckpt"])
def test_missing_local_path(path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_hf(path)


def test_file_instead_of_directory(tmp_path):
    f = tmp_path / "config.json"
    f.write_text("{}")
    with pytest.raises(FileNotFoundError, match="save_pretrained"):
        load_hf(str(f))


def test_unsupported_configs():
    with pytest.raises(NotImplementedError, match="hidden_act='relu'"):
        load_hf(_tiny_llama(hidden_act="relu"))
    with pytest.raises(NotImplementedError, match="activation_function='relu'"):
        load_hf(_tiny_gpt2(activation_function="relu"))
    with pytest.raises(NotImplementedError, match="scale_attn_by_inverse_layer_idx"):
        load_hf(_tiny_gpt2(scale_attn_by_inverse_layer_idx=True))
    linear = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(NotImplementedError, match="RoPE scaling"):
        load_hf(_tiny_llama(rope_parameters=linear))
    with pytest.raises(NotImplementedError, match="head_dim"):
        load_hf(_tiny_llama(head_dim=32))
    with pytest.raises(NotImplementedError, match="hidden_act='gelu'"):
        load_hf(tiny_hf_lm("mistral", hidden_act="gelu"))
    with pytest.raises(NotImplementedError, match="RoPE scaling"):
        load_hf(tiny_hf_lm("qwen2", rope_parameters=linear))
    with pytest.raises(NotImplementedError, match="head_dim=32"):
        load_hf(tiny_hf_lm("mistral", head_dim=32))
    with pytest.raises(NotImplementedError, match="BertModel"):
        load_hf(
            transformers.BertModel(
                transformers.BertConfig(
                    hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37
                )
            )
        )


def test_unknown_taper():
    with pytest.raises(ValueError, match="taper"):
        load_hf(_tiny_gpt2(), taper="sometimes")


def test_missing_transformers_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="pip install transformers"):
        load_hf("gpt2")
