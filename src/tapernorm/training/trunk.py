"""The trunk: the steps before the taper starts, trained once and shared by every variant.

Up to step `taper.start` the gate is 1, and a TaperNorm at g = 1 computes exactly the RMSNorm it
replaces (F.rms_norm, the same call): it only records its calibration statistics, and the scale
anchor only records r(h) (its loss is 0 until s_tgt freezes). Runs that differ in nothing but their
variant (which norms taper, whether the anchor is on and how strongly) therefore train bit-identical
steps 1..start: same init, same batches, same gradients. The trunk trains those steps once, as a
model whose every norm is a TaperNorm with the anchor on (so it records every statistic any variant
needs), and checkpoints at `start`; each run branches from that checkpoint (`init.trunk`) and
trains on from step start + 1. Its weights, record and eval.json are those it would reach from
step 0 (tests/test_trunk.py checks every Table 1 variant).

Exact only where g = 1 is the plain norm's kernel: RMS norms (LayerNorm's TaperNorm adds its bias
after the kernel, not inside it) and eager steps (inductor may fuse the recording into the norm's
kernel); `trunk_config` returns None for every other run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..config.run import RunConfig
from ..variants import VARIANTS
from .identity import config_identity

if TYPE_CHECKING:  # (the workflow plans trunks without torch: trunk_config needs none)
    import torch

    from ..anchor import ScaleAnchor
    from ..model import GPT

RECORD = "trunk.json"  # written last by train_trunk: the trunk is whole

# What the trunk's anchor says: its weight and form enter no step before s_tgt freezes, so every
# run of a trunk, whatever its own, shares these.
TRUNK_ANCHOR = {"enabled": True, "lam": 1.0, "form": "eq5"}


def trunk_config(cfg: RunConfig, name: str = "trunk") -> RunConfig | None:
    """The config of run `cfg`'s trunk (named `name`), or None where the run has no exact trunk:
    another norm than RMS, a compiled step, an init model, FakeLN, a variant not in the registry,
    or no step before the taper. Two runs share a trunk exactly when their trunk configs are
    equal."""
    model = cfg.model
    if (
        model.style != "llama"
        or model.norm_name != "default"
        or cfg.train.compile
        or cfg.init.source is not None
        or cfg.fakeln is not None
        or cfg.variant not in VARIANTS
        or not 0 < cfg.taper.start < cfg.train.steps
    ):
        return None
    d = cfg.to_dict()
    d.update(name=name, variant=None, meta={})
    d["model"]["taper"] = "all"
    d["anchor"] = dict(TRUNK_ANCHOR)
    d["taper"]["end"] = cfg.train.steps  # where the taper ends enters no step before it starts
    d["log"]["ckpt_every"] = cfg.taper.start  # its one checkpoint: the branch point
    d["init"]["trunk"] = None
    return RunConfig.from_dict(d)


def shares_trunk(cfg: RunConfig, trunk: RunConfig) -> bool:
    """Whether run `cfg` branches exactly from the trunk whose config is `trunk`."""
    own = trunk_config(cfg, trunk.name)
    return own is not None and own.to_dict() == trunk.to_dict()


def _optimizer_names(model: GPT) -> list[str]:
    """Parameter names in the order of the optimizer's state indices (run.make_optimizer's groups:
    the matrices, then the rest)."""
    named = list(model.named_parameters())
    return [n for n, p in named if p.dim() >= 2] + [n for n, p in named if p.dim() < 2]


def branch(
    cfg: RunConfig, model: GPT, opt: torch.optim.Optimizer, anchor: ScaleAnchor | None
) -> tuple[int, Path]:
    """Load the trunk `cfg.init.trunk` names into a fresh run: the weights and TaperNorm statistics
    the run's model has, the AdamW moments of its parameters (by name: the trunk's model has more
    of them), the anchor's statistics if the run has an anchor. Returns the trunk's step and the
    checkpoint directory it was read from (whose copy of the record the run starts from).
    CheckpointError when the trunk is missing, unfinished or another run's trunk."""
    from .checkpoint import CheckpointError, load_model_tensors, load_tensors, model_tensors
    from .state import optimizer_state, read_state, readable_checkpoint

    where = Path(cfg.init.trunk)
    ckpt = readable_checkpoint(where / "ckpt")
    if ckpt is None:
        raise CheckpointError(
            f"init.trunk {where} holds no checkpoint: train it first (`tapernorm train --trunk`, "
            "the Snakemake rule `trunk`)"
        )
    meta = read_state(ckpt)
    recorded = meta.get("run_config") or {}
    expected = trunk_config(cfg, recorded.get("name", "trunk"))
    if expected is None:
        raise CheckpointError(
            f"run {cfg.name} cannot branch from a trunk: its steps before the taper are its own "
            "(trunk_config)"
        )
    step = int(meta.get("step", -1))
    if step != cfg.taper.start:
        raise CheckpointError(
            f"init.trunk {where} is at step {step}, not the taper start {cfg.taper.start}: "
            "an unfinished trunk; rerun `tapernorm train --trunk`"
        )
    # the data's path aside: its content is compared as part of the run's identity
    exp, got = config_identity(expected.to_dict()), config_identity(recorded)
    if got != exp:
        diff = sorted(k for k in set(got) | set(exp) if got.get(k) != exp.get(k))
        raise CheckpointError(f"init.trunk {where} is the trunk of another run (differs: {diff})")
    tensors = load_tensors(ckpt / "state.safetensors")
    own = model_tensors(model)
    weights = {k[6:]: v for k, v in tensors.items() if k.startswith("model.") and k[6:] in own}
    load_model_tensors(model, weights, str(ckpt / "state.safetensors"))
    # the trunk's moments by parameter name; a parameter with no gradient yet (a TaperNorm's
    # gamma~) has none
    trunk_state = optimizer_state(tensors)
    by_name = {n: trunk_state.get(i) for i, n in enumerate(_trunk_names(recorded, tensors))}
    state = {i: by_name[n] for i, n in enumerate(_optimizer_names(model)) if by_name[n]}
    opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})
    if anchor is not None:
        anchor.load_state_dict({k[7:]: v for k, v in tensors.items() if k.startswith("anchor.")})
    return step, ckpt


def _trunk_names(recorded: dict, tensors: dict[str, torch.Tensor]) -> list[str]:
    """The trunk model's parameter names in its optimizer's order, from its config (built on the
    meta device: no memory)."""
    import torch

    from ..model import GPT, GPTConfig

    trunk = RunConfig.from_dict(recorded)
    vocab = tensors["model.tok_emb.weight"].shape[0]
    with torch.device("meta"):
        model = GPT(GPTConfig(**trunk.model.gpt_fields(vocab)))
    return _optimizer_names(model)
