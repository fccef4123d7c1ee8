"""GPT.step, the eager decode step's one-token fast path, is GPT.hidden's computation bit for bit;
GPT.generate needs nothing imported before it."""

import subprocess
import sys

import pytest
import torch

from tapernorm.bench.variants import paper_config, random_variants
from tapernorm.decode import new_cache
from tapernorm.model import GPT
from tapernorm.norms import set_gate


def tiny(**kw):
    base = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=97, block_size=48)
    return paper_config(**{**base, **kw})


def plain(**kw):
    torch.manual_seed(0)
    m = GPT(tiny(**kw)).eval()
    with torch.no_grad():
        for p in m.parameters():  # biases and gains away from their init
            p.add_(0.05 * torch.randn_like(p))
    return m


def tapered_frozen():
    m = random_variants(tiny(), seed=1)[1]  # Internal-Taper, c calibrated and frozen
    set_gate(m, 0.5)  # both branches of every TaperNorm
    return m


MODELS = {
    "llama": plain,
    "llama-gqa": lambda: plain(n_kv_head=1, qkv_bias=True, n_embd=48, n_head=4),
    "gpt2": lambda: plain(style="gpt2"),
    "tapered-frozen": tapered_frozen,
}


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("batch", [1, 3])
@torch.inference_mode()
def test_step_is_hidden_bit_for_bit(kind, batch):
    """Ten steps after a prompt, each through GPT.step and through GPT.hidden + head, each path
    with its own cache: the same logits exactly, and the same cached keys and values."""
    m = MODELS[kind]()
    P, steps = 5, 10
    prompt = torch.randint(0, 97, (batch, P), generator=torch.Generator().manual_seed(2))
    fast, general = new_cache(m, batch, P + steps), new_cache(m, batch, P + steps)
    tok = m.head(m.hidden(prompt, fast, 0)[:, -1]).argmax(-1, keepdim=True)
    m.hidden(prompt, general, 0)
    for pos in range(P, P + steps):
        z_fast = m.step(tok, fast, pos)
        z_general = m.head(m.hidden(tok, general, pos))[:, 0]
        assert torch.equal(z_fast, z_general), f"{kind}: step at position {pos} differs"
        tok = z_fast.argmax(-1, keepdim=True)
    for a, b in zip(fast, general, strict=True):
        assert torch.equal(a.k, b.k) and torch.equal(a.v, b.v)


def test_generate_needs_nothing_imported_before():
    """A fresh interpreter importing only tapernorm.model can generate: no registry to fill."""
    code = (
        "import torch\n"
        "from tapernorm.model import GPT, GPTConfig\n"
        "torch.manual_seed(0)\n"
        "m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, vocab_size=11, block_size=16))\n"
        "print(m.generate(torch.zeros(1, 3, dtype=torch.long), 4).shape)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "torch.Size([1, 7])"
