"""decode.py: GPT.generate's sampling, its compiled path and the decoder cache on the model.

The cache tests trace with dynamo's eager backend (no code generation, fast); the slow test compiles
with inductor as generate(compile=True) does.
"""

import copy
import pickle

import pytest
import torch
from torch import nn

from tapernorm import decode
from tapernorm.bench.variants import paper_config, random_variants
from tapernorm.decode import (
    DecoderCache,
    StaticDecoder,
    linears_as_reductions,
    new_cache,
    sample,
    static_decoder,
)
from tapernorm.fold import export_explicit_scaling, fold_model
from tapernorm.model import GPT
from tapernorm.norms import set_gate


def tiny(**kw):
    base = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=97, block_size=48)
    return paper_config(**{**base, **kw})


def model(seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(tiny(**kw)).eval()


@pytest.fixture
def builds(monkeypatch):
    """generate(compile=True) with trace-only compiled decoders; lists the (batch, length) built."""
    built = []

    def trace_only(m, batch, length, fullgraph=True, gemv=False):
        built.append((batch, length))
        return static_decoder(m, batch, length, backend="eager", fullgraph=fullgraph)

    monkeypatch.setattr(decode, "compiled_decoder", trace_only)
    torch._dynamo.reset()
    return built


def prompt(batch=2, length=5, seed=1):
    return torch.randint(0, 97, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.inference_mode()
def hidden_path(m, x, steps):
    """Greedy decoding through GPT.hidden with a KVCache (the model's own path): tokens, logits."""
    B, P = x.shape
    cache = new_cache(m, B, P + steps)
    logits = [m.head(m.hidden(x, cache, 0)[:, -1])]
    tokens = [x, logits[-1].argmax(-1, keepdim=True)]
    for i in range(steps - 1):
        logits.append(m.head(m.hidden(tokens[-1], cache, P + i))[:, 0])
        tokens.append(logits[-1].argmax(-1, keepdim=True))
    return torch.cat(tokens, 1), torch.stack(logits, 1)


NORMS = {
    "llama": dict(),
    "llama-gqa-qkv-bias": dict(n_kv_head=1, qkv_bias=True, n_embd=48, n_head=4),
    "gpt2": dict(style="gpt2"),
    "dyt": dict(norm="dyt"),
    "fakeln": dict(style="gpt2", norm="fakeln"),
}


def variant(kind, seed):
    if kind in NORMS:
        m = model(seed=seed, **NORMS[kind])
        for p in m.parameters():  # biases and norm gains away from their init
            p.data.add_(0.05 * torch.randn_like(p))
        return m
    tapered = random_variants(tiny(), seed=seed)[1]
    return {"explicit": export_explicit_scaling, "folded": fold_model}.get(kind, set_half)(tapered)


KINDS = [*NORMS, "taper-g0.5", "explicit", "folded"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch", [1, 3])
def test_eager_step_is_the_models_path(kind, batch, monkeypatch):
    """generate's eager step against GPT.hidden with a cache, for every style, norm and export: the
    same tokens, and the same logits up to the rounding of step_linear's kernel (here on every
    layer of the tiny models, where torch has it)."""
    monkeypatch.setattr(decode, "ONEDNN_WEIGHTS", 0)
    m, x = variant(kind, batch), prompt(batch)
    tokens, logits = m.generate(x, 12, return_logits=True)
    expected = hidden_path(m, x, 12)
    assert torch.equal(tokens, expected[0])
    torch.testing.assert_close(logits, expected[1], rtol=1e-5, atol=1e-5 * logits.abs().max())


@pytest.mark.parametrize("kind", KINDS)
def test_eager_step_with_the_layers_own_kernel_is_bit_for_bit(kind, monkeypatch):
    """With the layers computing themselves, the step is GPT.hidden's computation exactly: only
    the kernel of the linear layers may differ from the model's path."""
    monkeypatch.setattr(decode, "step_linear", lambda *args: decode.layer_linear)
    m, x = variant(kind, 2), prompt(2)
    tokens, logits = m.generate(x, 12, return_logits=True)
    expected = hidden_path(m, x, 12)
    assert torch.equal(tokens, expected[0]) and torch.equal(logits, expected[1])


@pytest.mark.parametrize("bias", [False, True])
def test_step_linear_is_the_layer_up_to_rounding(bias):
    """oneDNN's kernel for a CPU step's large float32 layers over few rows (where torch has it),
    the layer itself otherwise."""
    d = int(decode.ONEDNN_WEIGHTS**0.5)
    large, small = nn.Linear(d, d, bias=bias), nn.Linear(d, d - 1, bias=bias)
    cpu, f32 = torch.device("cpu"), torch.float32
    with torch.inference_mode():
        for rows in (1, decode.GEMV_ROWS):
            x = torch.randn(rows, d)
            torch.testing.assert_close(decode.step_linear(cpu, f32, rows)(large, x), large(x))
            assert torch.equal(decode.step_linear(cpu, f32, rows)(small, x), small(x))
        x = torch.randn(decode.GEMV_ROWS + 1, d)
        assert torch.equal(decode.step_linear(cpu, f32, len(x))(large, x), large(x))
        half = large.to(torch.bfloat16)
        x = torch.randn(1, d, dtype=torch.bfloat16)
        assert torch.equal(decode.step_linear(cpu, torch.bfloat16, 1)(half, x), half(x))


def set_half(m):
    set_gate(m, 0.5)  # both TaperNorm branches
    return m


def test_sampling_is_reproducible_and_top_k_restricts():
    m = model()
    x = prompt()
    draws = [
        m.generate(x, 12, temperature=1.5, generator=torch.Generator().manual_seed(7))
        for _ in range(2)
    ]
    assert torch.equal(*draws) and not torch.equal(draws[0], m.generate(x, 12))
    top1 = m.generate(x, 12, temperature=2.0, top_k=1, generator=torch.Generator().manual_seed(3))
    assert torch.equal(top1, m.generate(x, 12))  # only the argmax keeps probability
    logits = torch.randn(4, 97, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    picks = torch.cat([sample(logits, 1.0, top_k=3, generator=gen) for _ in range(200)], 1)
    top3 = logits.topk(3).indices
    assert all(set(picks[b].tolist()) <= set(top3[b].tolist()) for b in range(4))


def test_generate_returns_ordinary_tensors_and_handles_edges():
    m = model()
    x = prompt()
    out, logits = m.generate(x, 6, return_logits=True)
    assert out.shape == (2, 11) and logits.shape == (2, 6, 97) and torch.equal(out[:, :5], x)
    out[:, 0] = 0  # not an inference tensor: the caller may change it in place
    assert torch.equal(m.generate(x, 0), x)
    assert m.generate(x, 0, return_logits=True)[1].shape == (2, 0, 97)
    assert m.generate(prompt(1, 40), 9).shape == (1, 49)  # feeds 48 positions: the whole block
    with pytest.raises(ValueError, match="block_size"):
        m.generate(prompt(1, 40), 10)
    with pytest.raises(ValueError, match="temperature"):
        m.generate(x, 2, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        m.generate(x, 2, temperature=1.0, top_k=0)


@pytest.mark.parametrize("style", ["llama", "gpt2"])
def test_compiled_generate_equals_eager_and_is_cached(builds, style):
    m = model(style=style, n_kv_head=1 if style == "llama" else None)
    x = prompt()
    eager, z_eager = m.generate(x, 10, return_logits=True)
    compiled, z_compiled = m.generate(x, 10, return_logits=True, compile=True)
    assert torch.equal(compiled, eager)
    assert torch.allclose(z_compiled, z_eager, atol=1e-5)
    assert torch.equal(m.generate(x, 20, compile=True), m.generate(x, 20))
    assert builds == [(2, 48)]  # 14 and 24 positions both round up to 64, capped at block_size
    m.generate(prompt(batch=3), 4, compile=True)
    assert builds == [(2, 48), (3, 48)]  # a new batch size builds its own


def test_cached_decoder_follows_the_weights(builds):
    m, other = model(seed=0), model(seed=1)
    x = prompt()
    m.generate(x, 8, compile=True)
    m.load_state_dict(other.state_dict())  # copied in place: the decoder reads them at each call
    assert torch.equal(m.generate(x, 8, compile=True), other.generate(x, 8)) and len(builds) == 1
    third = model(seed=2)
    m.load_state_dict(third.state_dict(), assign=True)  # new tensors: decoders are rebuilt
    assert torch.equal(m.generate(x, 8, compile=True), third.generate(x, 8)) and len(builds) == 2
    m.blocks[1].mlp = copy.deepcopy(other.blocks[1].mlp)  # a swapped submodule: rebuilt too
    assert torch.equal(m.generate(x, 8, compile=True), m.generate(x, 8)) and len(builds) == 3
    m.double()
    assert torch.equal(m.generate(x, 8, compile=True), m.generate(x, 8)) and len(builds) == 4


def test_copies_and_exports_start_without_decoders(builds):
    baseline, tapered = random_variants(tiny(), seed=0)
    x = prompt()
    tapered.generate(x, 8, compile=True)  # TaperNorm reads its gate as a number: graph breaks
    assert len(DecoderCache.of(tapered).decoders) == 1
    for clone in (copy.deepcopy(tapered), pickle.loads(pickle.dumps(tapered))):
        assert not DecoderCache.of(clone).decoders
        assert torch.equal(clone.generate(x, 8, compile=True), tapered.generate(x, 8))
    folded = fold_model(tapered)
    assert not DecoderCache.of(folded).decoders
    assert torch.equal(folded.generate(x, 8, compile=True), folded.generate(x, 8))
    assert "_decoder_cache" not in str(tapered.state_dict().keys())
    assert not any(isinstance(v, nn.Module) for v in vars(tapered).values())


@pytest.mark.parametrize("batch", [2, 5])
def test_small_batch_linears_become_reductions(batch):
    """The compiled CPU decoder's rewrite: every linear of a step at batch <= 4 (2 layers x 5, and
    the head), none above; the step's logits stay those of the unrewritten graph up to rounding."""
    m = model(n_kv_head=1)
    counts = []

    def rewrite_then_run(gm, example_inputs):
        counts.append(linears_as_reductions(gm))
        return gm.forward

    torch._dynamo.reset()
    decoder = StaticDecoder(m, batch, 12)
    step = torch.compile(decoder, backend=rewrite_then_run, fullgraph=True)
    with torch.inference_mode():
        decoder.prefill(prompt(batch))
        tok, pos = prompt(batch, 1, seed=2), torch.tensor([5])
        z = step(tok, pos)
        decoder.prefill(prompt(batch))  # the same cache again for the plain step
        assert torch.allclose(z, decoder(tok, pos), rtol=0, atol=1e-5)
    assert counts == [11 if batch <= decode.GEMV_ROWS else 0]


@pytest.mark.slow
def test_inductor_compiled_generate_equals_eager_without_recompiling():
    """generate(compile=True) as users get it (inductor; on a CPU its C++ wrapper), float32, greedy:
    the tokens of the eager path, and a second call compiles nothing."""
    from torch._dynamo.utils import counters

    m = model(seed=3, n_kv_head=1)
    x = prompt(seed=4)
    torch._dynamo.reset()
    assert torch.equal(m.generate(x, 16, compile=True), m.generate(x, 16))
    frames = dict(counters["frames"])
    assert torch.equal(m.generate(prompt(seed=5), 16, compile=True), m.generate(prompt(seed=5), 16))
    assert dict(counters["frames"]) == frames
