"""The eager decode step is the model's own path with the kernels it chooses; one attention call;
GPT.generate needs nothing imported before it."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tapernorm import model as model_module
from tapernorm.bench.variants import paper_config, random_variants
from tapernorm.decode import eager_decoder
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
@torch.inference_mode()
def test_the_eager_step_puts_every_projection_on_its_linear(kind):
    """The eager decode step is the model's one path (GPT.hidden, GPT.head) with `linear` choosing
    the kernel of every projection: each linear layer of every block and the head, once a step."""
    m = MODELS[kind]()
    seen = []

    def counting(layer, x):
        seen.append(layer)
        return layer(x)

    prefill, step = eager_decoder(m, 2, 8, linear=counting)
    prefill(torch.zeros(2, 3, dtype=torch.long))
    seen.clear()
    step(torch.zeros(2, 1, dtype=torch.long), 3)
    layers = [mod for mod in m.modules() if isinstance(mod, torch.nn.Linear)]
    assert sorted(map(id, seen)) == sorted(map(id, layers))


def test_the_model_calls_attention_once():
    """One attention path: a single scaled_dot_product_attention call in the model's source."""
    source = Path(model_module.__file__).read_text()
    assert source.count("scaled_dot_product_attention(") == 1


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
