"""Folding (Sec. 4): folded and explicit-scaling exports give the g=0 model's logits."""

import pytest
import torch

from tapernorm import GPT, GPTConfig, export_explicit_scaling, fold_model, set_gate, verify_fold
from tapernorm.fold import FoldError, FoldVerificationError
from tapernorm.norms import FixedScale, taper_norms


def random_tapered(style: str, taper: str, seed: int = 0, tie: bool = True) -> GPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(
        style=style,
        n_layer=3,
        n_head=4,
        n_embd=64,
        vocab_size=97,
        block_size=32,
        taper=taper,
        tie_embeddings=tie,
    )
    m = GPT(cfg)
    with torch.no_grad():
        for _, n in taper_norms(m):
            n.weight_tilde.uniform_(0.3, 2.0)
            n.c.fill_(float(torch.empty(()).uniform_(0.05, 3.0)))
            if n.bias is not None:
                n.bias.normal_(0, 0.5)
    set_gate(m, 0.0)
    return m.eval()


CASES = [
    (s, t, tie)
    for s in ("llama", "gpt2")
    for t in ("internal", "final", "all")
    for tie in (True, False)
]


@pytest.mark.parametrize("style,taper,tie", CASES)
def test_folded_logits_equal_unfolded(style, taper, tie):
    m = random_tapered(style, taper, tie=tie)
    x = torch.randint(0, 97, (4, 32))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    folded = fold_model(m)
    ref, out = m(x), folded(x)
    assert (ref - out).abs().max() <= 1e-5 * ref.abs().max()
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())  # input unchanged
    assert not any(
        True for _ in taper_norms(folded)
    )  # no per-token statistics left in tapered spots
    assert folded.config.norm == "folded"
    if taper in ("final", "all"):
        assert not folded.config.tie_embeddings
        assert torch.equal(folded.tok_emb.weight, m.tok_emb.weight)
    report = verify_fold(m, folded, x)
    assert report["ok"] and abs(report["loss_diff"]) < 1e-4
    # the folded model decodes the same tokens
    assert torch.equal(m.generate(x[:, :5], 8), folded.generate(x[:, :5], 8))


@pytest.mark.parametrize("style,taper,tie", CASES[:3] + CASES[6:9])
def test_explicit_scaling_equals_unfolded(style, taper, tie):
    m = random_tapered(style, taper, tie=tie)
    x = torch.randint(0, 97, (2, 32))
    scaled = export_explicit_scaling(m)
    assert any(isinstance(n, FixedScale) for n in scaled.modules())
    assert (m(x) - scaled(x)).abs().max() <= 1e-5 * m(x).abs().max()


def test_fold_refuses_nonzero_gate():
    m = random_tapered("llama", "internal")
    set_gate(m, 0.2)
    with pytest.raises(FoldError, match="gate"):
        fold_model(m)


def test_verify_fails_loudly_on_a_wrong_fold():
    m = random_tapered("llama", "internal")
    folded = fold_model(m)
    with torch.no_grad():
        folded.blocks[1].attn.qkv.weight.mul_(1.01)
    with pytest.raises(FoldVerificationError):
        verify_fold(m, folded, torch.randint(0, 97, (2, 16)))


def test_fold_of_untapered_model_is_identity():
    m = random_tapered("gpt2", "none")
    x = torch.randint(0, 97, (2, 16))
    assert torch.equal(m(x), fold_model(m)(x))


def test_an_export_does_not_fold_again():
    folded = fold_model(random_tapered("llama", "all"))
    with pytest.raises(FoldError, match="already exported \\(norm 'folded'\\)"):
        fold_model(folded)
    with pytest.raises(FoldError, match="already exported \\(norm 'scale'\\)"):
        fold_model(export_explicit_scaling(random_tapered("gpt2", "internal")))
