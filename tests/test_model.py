"""The GPT: pre-norm block wiring, configs, KV-cache decoding."""

import pytest
import torch

from tapernorm import GPT, GPTConfig, TaperNorm
from tapernorm.decode import new_cache
from tapernorm.model import Block, convert_norms
from tapernorm.norms import DyT, FakeNorm, FixedScale, LayerNorm, RMSNorm


def tiny(style="llama", taper="none", **kw) -> GPTConfig:
    base = dict(
        style=style, n_layer=2, n_head=4, n_embd=32, vocab_size=61, block_size=48, taper=taper
    )
    return GPTConfig(**{**base, **kw})


@pytest.mark.parametrize("style", ["llama", "gpt2"])
def test_block_is_pre_norm(style):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x)): computed here by hand from the submodules."""
    torch.manual_seed(0)
    cfg = tiny(style)
    block = Block(cfg)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    x = torch.randn(2, 9, 32)
    model = GPT(cfg)
    rope = (model.rope_cos[:9], model.rope_sin[:9]) if style == "llama" else None
    h1 = x + block.attn(block.ln_1(x), rope)
    expected = h1 + block.mlp(block.ln_2(h1))
    assert torch.allclose(block(x, rope), expected, atol=1e-6)
    # and not the post-norm or "norm the residual" variants
    wrong = block.ln_1(x) + block.attn(block.ln_1(x), rope)
    assert not torch.allclose(h1, wrong, atol=1e-3)


@pytest.mark.parametrize(
    "style,taper,norm_types",
    [
        ("llama", "none", (RMSNorm, RMSNorm)),
        ("llama", "internal", (TaperNorm, RMSNorm)),
        ("llama", "final", (RMSNorm, TaperNorm)),
        ("gpt2", "all", (TaperNorm, TaperNorm)),
        ("gpt2", "none", (LayerNorm, LayerNorm)),
    ],
)
def test_taper_places_tapernorms(style, taper, norm_types):
    m = GPT(tiny(style, taper))
    assert isinstance(m.blocks[0].ln_1, norm_types[0]) and isinstance(
        m.blocks[1].ln_2, norm_types[0]
    )
    assert isinstance(m.ln_f, norm_types[1])
    kinds = {n.kind for n in m.modules() if isinstance(n, TaperNorm)}
    assert kinds <= {"rms" if style == "llama" else "layer"}


def test_param_count_matches_paper_30m():
    m = GPT(GPTConfig(n_layer=8, n_head=16, n_embd=512, vocab_size=10000, block_size=512))
    assert 29e6 < m.num_params() < 31.5e6  # "d=512 -> 30M" with hidden 8d/3, tied embeddings


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(style="bert"), "style"),
        (dict(taper="half"), "taper"),
        (dict(n_embd=30, n_head=4), "n_embd"),
        (dict(n_layer=0), "n_layer"),
        (dict(n_kv_head=3), "n_kv_head"),
    ],
)
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(ValueError, match=f"GPTConfig.{field}"):
        tiny(**kw)


@pytest.mark.parametrize("style", ["llama", "gpt2"])
@pytest.mark.parametrize("taper", ["none", "all"])
def test_generate_with_cache_equals_uncached(style, taper):
    torch.manual_seed(3)
    m = GPT(tiny(style, taper, n_kv_head=2 if style == "llama" else None)).eval()
    prompt = torch.randint(0, 61, (3, 7))
    out, logits = m.generate(prompt, 12, return_logits=True)
    assert out.shape == (3, 19) and torch.equal(out[:, :7], prompt)
    idx = prompt
    for i in range(12):  # repeated uncached forwards, greedy
        z = m(idx)[:, -1]
        assert torch.allclose(z, logits[:, i], atol=1e-5)
        idx = torch.cat([idx, z.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(idx, out)


def test_chunked_prefill_with_cache():
    """A multi-token chunk after cached tokens sees exactly its causal past."""
    torch.manual_seed(4)
    m = GPT(tiny()).eval()
    x = torch.randint(0, 61, (2, 20))
    cache = new_cache(m, 2, 20)
    a = m.hidden(x[:, :8], cache, 0)
    b = m.hidden(x[:, 8:], cache, 8)
    assert torch.allclose(torch.cat([a, b], 1), m.hidden(x), atol=1e-5)


def test_generate_beyond_block_size_is_an_error():
    m = GPT(tiny())
    with pytest.raises(ValueError, match="block_size"):
        m.generate(torch.zeros(1, 40, dtype=torch.long), 20)


def test_convert_norms_keeps_the_function():
    torch.manual_seed(5)
    for style in ("llama", "gpt2"):
        m = GPT(tiny(style))
        with torch.no_grad():
            for n in m.modules():
                if isinstance(n, (RMSNorm, LayerNorm)):
                    n.weight.uniform_(0.5, 1.5)
        t = convert_norms(m, "all")
        x = torch.randint(0, 61, (2, 10))
        assert torch.allclose(m(x), t(x), atol=1e-6)
        assert torch.equal(t.ln_f.weight_tilde, t.ln_f.weight)


@pytest.mark.parametrize(
    "norm,taper,tapered,plain",
    [
        ("default", "internal", TaperNorm, RMSNorm),
        ("scale", "internal", FixedScale, RMSNorm),
        ("folded", "internal", torch.nn.Identity, RMSNorm),
        ("dyt", "none", None, DyT),
        ("fakeln", "none", None, FakeNorm),
    ],
)
def test_norm_is_the_one_selector(norm, taper, tapered, plain):
    """GPTConfig.norm and taper alone decide every norm position (GPTConfig's table)."""
    m = GPT(tiny("llama", taper, norm=norm))
    assert type(m.ln_f) is plain
    for block in m.blocks:
        assert type(block.ln_1) is type(block.ln_2) is (tapered or plain)


@pytest.mark.parametrize(
    "kw,why",
    [
        (dict(norm="dyt", taper="all"), "must be 'none' with norm 'dyt'"),
        (dict(norm="fakeln", taper="final"), "must be 'none' with norm 'fakeln'"),
        (dict(norm="folded"), "must name the norms that norm 'folded' is"),
        (dict(norm="rms"), "GPTConfig.norm: must be one of"),
    ],
)
def test_norm_and_taper_that_contradict_are_refused(kw, why):
    with pytest.raises(ValueError, match=why):
        tiny(**kw)


@pytest.mark.parametrize(
    "mode,norm", [("taper", "default"), ("scale", "scale"), ("folded", "folded")]
)
def test_config_written_with_the_old_norm_mode_still_loads(mode, norm):
    """config.json from before `norm` took in norm_mode (every run and fold directory of then)."""
    old = {**tiny("gpt2", "all").to_dict(), "norm_mode": mode}
    assert GPTConfig.from_dict(old) == tiny("gpt2", "all", norm=norm)
    plain = {**old, "taper": "none"}  # an untapered model's "export" was a plain copy
    assert GPTConfig.from_dict(plain) == tiny("gpt2", "none")
    with pytest.raises(ValueError, match="norm_mode 'folded' with norm 'dyt'"):
        GPTConfig.from_dict({**old, "norm": "dyt", "norm_mode": "folded"})
