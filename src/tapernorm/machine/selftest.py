"""`tapernorm selftest`: run on a new machine before spending GPU-hours on it.

A few optimizer steps of every model family and training feature the paper config uses (the llama
variants with the gate going 1 -> 0 through calibration and taper start, both scale-loss forms, DyT,
the gpt2 style fine-tuned with TaperLN and FakeLN, gradient accumulation, bf16 autocast), the whole
training loop with a checkpoint and a resume, fold and verify, and KV-cache decoding eager and
compiled. One line per check, then a summary; `run_selftest` returns each check's result.

On the `meta` device tensors have shapes but no values: a tensor made on the host that meets a model
tensor raises, and so does every read of a device value (.item(), float(), bool(), .tolist()). The
training checks there run their steps as unlogged steps, so passing on meta proves both device
placement and that a training step reads nothing back from the device between log boundaries.
Eager decoding runs there too (placement only); the checks that need values (the loop's
boundaries, folding, compiled decoding) are skipped on meta.

The run configs below are complete resolved configs (a test holds them to the run schema), so the
selftest needs no jsonschema: it runs on a bare GPU machine with torch and numpy.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from ..config.run import RunConfig
from ..model import DYT_RECIPE
from ..runtime import jsonio

VOCAB, STEPS, TAPER_START, TAPER_END = 96, 6, 2, 5  # g = 1 for steps 1-2, 0 from step 5

BASE_CONFIG: dict = {
    "name": "selftest",
    "seed": 0,
    "variant": None,
    "meta": {},
    "data": {"dir": "", "train_tokens": None},
    "model": {
        "n_layer": 2,
        "n_head": 2,
        "n_embd": 32,
        "block_size": 16,
        "style": "llama",
        "vocab_size": None,
        "taper": "none",
        "n_kv_head": None,
        "mlp_hidden": None,
        "bias": None,
        "tie_embeddings": True,
        "norm_eps": 1e-05,
        "rope_theta": 10000.0,
    },
    "train": {
        "steps": STEPS,
        "batch_size": 4,
        "warmup_steps": TAPER_START,
        "grad_accum": 1,
        "lr": 1e-3,
        "min_lr": 0.0,
        "betas": [0.9, 0.95],
        "weight_decay": 0.0,
        "grad_clip": 1.0,
        "device": "cpu",
        "dtype": "float32",
        "compile": False,
    },
    "init": {"from": None},
    "taper": {"start": TAPER_START, "end": TAPER_END, "ema_mu": 0.5, "delta": 1e-08},
    "anchor": {"enabled": False, "lam": 0.1, "form": "eq5"},
    "log": {
        "every": 1000,
        "eval_every": 0,
        "eval_windows": 4,
        "eval_batch_size": 4,
        "ckpt_every": 1000,
        "geometry": False,
    },
}


@dataclass(frozen=True)
class TrainCheck:
    """A few training steps of one model family and feature set: overrides of BASE_CONFIG."""

    name: str
    model: dict
    anchor: dict | None = None  # None: no scale loss
    grad_accum: int = 1
    dtype: str | None = None  # None: the selftest's --dtype
    gpt2_init: bool = False  # fine-tune a saved gpt2-style model (init.from), as Sec. 6.4 does
    compile: bool = False  # train.compile: the training forward through torch.compile

    def config(self, data_dir: str, device: str, dtype: str, init_dir: str) -> RunConfig:
        base = BASE_CONFIG
        model = {**base["model"], **self.model, **({"style": "gpt2"} if self.gpt2_init else {})}
        train = {
            **base["train"],
            "dtype": self.dtype or dtype,
            "grad_accum": self.grad_accum,
            "device": device if device in ("cpu", "cuda") else "cpu",
            "compile": self.compile,
        }
        anchor = base["anchor"] if self.anchor is None else {**base["anchor"], "enabled": True}
        cfg = {
            **copy.deepcopy(base),
            "name": f"selftest-{self.name}",
            "data": {**base["data"], "dir": data_dir},
            "model": model,
            "train": train,
            "anchor": {**anchor, **(self.anchor or {})},
            "init": {"from": init_dir if self.gpt2_init else None},
        }
        if model.get("norm") == "fakeln":
            cfg["fakeln"] = {"start": TAPER_START, "end": TAPER_END, "ema_mu": 0.5}
        return RunConfig.from_dict(cfg)


TRAIN_CHECKS = (
    TrainCheck("llama baseline (RMSNorm), grad accumulation 2", {}, grad_accum=2),
    TrainCheck("llama Internal-Taper (+aux, Eq. 5)", {"taper": "internal"}, {"form": "eq5"}),
    TrainCheck("llama All-Taper (+aux, relative form)", {"taper": "all"}, {"form": "relative"}),
    TrainCheck("llama Final-Taper, grad accumulation 2", {"taper": "final"}, grad_accum=2),
    TrainCheck("llama DyT (its LLaMA recipe)", dict(DYT_RECIPE)),
    TrainCheck("gpt2 Internal-TaperLN (+aux)", {"taper": "internal"}, {}, 2, None, True),
    TrainCheck("gpt2 All-TaperLN (+aux)", {"taper": "all"}, {}, gpt2_init=True),
    TrainCheck("gpt2 FakeLN", {"norm": "fakeln"}, gpt2_init=True),
    TrainCheck("llama All-Taper (+aux), bf16 autocast", {"taper": "all"}, {}, dtype="bfloat16"),
    TrainCheck("llama All-Taper (+aux), train.compile", {"taper": "all"}, {}, compile=True),
)
FOLDED = (TRAIN_CHECKS[1], TRAIN_CHECKS[6])  # Internal-Taper (+aux) and All-TaperLN, at g = 0
DECODED = TRAIN_CHECKS[1]


@dataclass
class Result:
    name: str
    status: str  # pass | fail | skip
    seconds: float
    detail: str = ""

    def line(self) -> str:
        detail = f"  {self.detail}" if self.detail else ""
        return f"{self.status.upper():4}  {self.name}  ({self.seconds:.1f} s){detail}"


def write_random_shards(data_dir: Path, seed: int = 0) -> None:
    """Token shards of random tokens (uint16 train.bin / val.bin and meta.json, as write_shards
    lays them out): enough for the selftest's windows, no tokenizer needed."""
    data_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sizes = {"train": 4096, "val": 512}
    for split, n in sizes.items():
        rng.integers(0, VOCAB, n, dtype=np.uint16).tofile(data_dir / f"{split}.bin")
    meta = {
        "vocab_size": VOCAB,
        "eot_id": 0,
        "tokenizer": {"kind": "none (selftest: random tokens)"},
        "dtype": "uint16",
        "train_tokens": sizes["train"],
        "val_tokens": sizes["val"],
        "train_docs": 1,
        "val_docs": 1,
    }
    (data_dir / "meta.json").write_text(jsonio.dumps(meta))


def save_gpt2_init(model_dir: Path) -> None:
    """A random gpt2-style model (LayerNorms, learned positions, biases) saved as a run's weights:
    the init the fine-tuning checks start from."""
    from ..model import GPT, GPTConfig
    from ..training.checkpoint import save_model

    torch.manual_seed(0)
    m = BASE_CONFIG["model"]
    size = {k: m[k] for k in ("n_layer", "n_head", "n_embd", "block_size")}
    save_model(GPT(GPTConfig(style="gpt2", vocab_size=VOCAB, **size)), model_dir)


# ---- the checks ----------------------------------------------------------------------------------


def train_check(cfg: RunConfig, device: torch.device):
    """STEPS optimizer steps of `cfg` through the training loop's own step; on a device with values
    the last step is a logged one and the end state is checked. Returns the trained model."""
    from ..norms import taper_norms
    from ..training.distributed import World
    from ..training.loop import StepChecks, start_step, train_step
    from ..training.run import set_up
    from ..training.run_dir import RunDir

    run = set_up(cfg, RunDir(Path(cfg.data.dir).parent / "unused"), World(), device)
    run.model.train()
    checks = StepChecks(run, [])
    meta = device.type == "meta"
    for step in range(1, STEPS + 1):
        result = train_step(run, start_step(run, step), logged=step == STEPS and not meta)
        checks.add(result)
    if meta:
        return run.model
    checks.check(logged=True)  # every step's values, read once
    bad = checks.diverged
    if bad is not None:
        raise AssertionError(f"non-finite {bad[1]} at step {bad[0]}")
    tapers = [norm for _, norm in taper_norms(run.model)]
    if any(norm.gate_value != 0.0 or not norm.is_frozen for norm in tapers):
        raise AssertionError("the gate did not reach 0 with c frozen")
    if any(not torch.isfinite(norm.c) or float(norm.c) == 1.0 for norm in tapers):
        raise AssertionError("c was not calibrated")
    if run.anchor is not None and not (run.anchor.is_frozen and torch.isfinite(run.anchor.target)):
        raise AssertionError("the scale loss's target s_tgt was not frozen")
    if run.fakeln is not None and not all(n.is_frozen for n in run.fakeln.norms.values()):
        raise AssertionError("FakeLN did not remove every norm")
    return run.model


def loop_check(cfg: RunConfig, out: Path) -> str:
    """The whole `train`: stopped after a checkpoint, resumed, finished; eval.json at g = 0."""
    from ..training.loop import train

    cfg = cfg.replace(log=dataclasses.replace(cfg.log, every=2, ckpt_every=3, eval_every=4))
    train_log = logging.getLogger("tapernorm.training.loop")
    level = train_log.level
    train_log.setLevel(logging.WARNING)  # its progress lines would drown the check lines
    try:
        first = train(cfg, out, stop_after=3)
        result = train(cfg, out)
    finally:
        train_log.setLevel(level)
    if first != {"stopped_at": 3}:
        raise AssertionError(f"stop_after=3 returned {first}")
    if result["diverged"] or result["val_loss"] is None or result["weights_step"] != STEPS:
        raise AssertionError(f"eval.json after the resume: {result}")
    return f"val loss {result['val_loss']:.3f} at g=0 after a resume from step 3"


def fold_check(trained: dict, name: str, device: torch.device) -> str:
    """The model of training check `name` (at g = 0) folded, its logits verified."""
    from ..fold import fold_model, verify_fold

    model = trained[name].eval()
    idx = torch.randint(0, VOCAB, (2, BASE_CONFIG["model"]["block_size"]), device=device)
    report = verify_fold(model, fold_model(model), idx)
    return f"max relative logit difference {report['rel_logit_diff']:.1e}"


def decode_check(trained: dict, name: str, device: torch.device, mode: str) -> str:
    """Greedy KV-cache decoding (eager or compiled) of training check `name`'s model against
    uncached argmax, token for token."""
    model = trained[name].eval()
    prompt = torch.randint(0, VOCAB, (2, 5)).to(device)
    new = 8
    tokens = model.generate(prompt, new, compile=mode == "compiled")
    if device.type == "meta":
        return "placement only: no values on meta"
    with torch.no_grad():
        ref = prompt
        for _ in range(new):
            ref = torch.cat([ref, model(ref)[:, -1].argmax(-1, keepdim=True)], dim=1)
    if not torch.equal(tokens, ref):
        agree = (tokens == ref).float().mean().item()
        raise AssertionError(f"decoded tokens differ from uncached argmax ({agree:.0%} agree)")
    return f"{new} tokens x 2 sequences equal to uncached argmax"


# ---- the runner ----------------------------------------------------------------------------------


def _timed(name: str, fn: Callable[[], object]) -> tuple[Result, object]:
    start = time.perf_counter()
    try:
        value = fn()
    except Exception as e:  # a failing check is reported, never raised: the next one runs
        frames = traceback.extract_tb(e.__traceback__)
        ours = [f for f in frames if "torch" not in Path(f.filename).parts]
        where = (ours or frames)[-1]  # the deepest frame outside torch: where our code went wrong
        detail = f"{type(e).__name__}: {e} [{Path(where.filename).name}:{where.lineno}]"
        return Result(name, "fail", time.perf_counter() - start, detail.replace("\n", " ")), None
    detail = value if isinstance(value, str) else ""
    return Result(name, "pass", time.perf_counter() - start, detail), value


def bf16_available(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu"


def skip_reason(
    name: str, device: torch.device, compile: bool | None, needs_values: bool
) -> str | None:
    """Why check `name` does not run on `device`, or None. `compile` None: compiled decoding on
    CUDA only, compiled training (not what the paper config uses) only when asked for."""
    if needs_values and device.type == "meta":
        return "needs values (not on meta)"
    if "compile" in name and compile is None and not (device.type == "cuda" and "decode" in name):
        return "compiling takes a minute or more: --compile runs it"
    if "compile" in name and compile is False:
        return "--no-compile"
    if "bf16" in name and not bf16_available(device):
        return f"no bf16 autocast on {device.type}"
    return None


LOOP = "training loop: checkpoint, resume, eval.json"
DECODE_MODES = ("eager", "compiled")


def fold_name(c: TrainCheck) -> str:
    return f"fold and verify: {c.name}"


def decode_name(mode: str) -> str:
    return f"decode, KV cache, {mode}"


def check_names() -> list[str]:
    """Every check's name, in the order they run (what --only selects from)."""
    return [
        *(c.name for c in TRAIN_CHECKS),
        LOOP,
        *map(fold_name, FOLDED),
        *map(decode_name, DECODE_MODES),
    ]


def run_selftest(
    device: str = "auto",
    dtype: str = "auto",
    compile: bool | None = None,
    only: str | None = None,
    report: Callable[[str], None] = print,
) -> list[Result]:
    """Every check on `device` (auto | cpu | cuda[:N] | meta), training in `dtype`. `compile`: run
    the compiled checks (True), none (False), or compiled decoding on CUDA only (None). `only`: the
    checks whose name contains it (ValueError if none does)."""
    from ..runtime.device import resolve_device

    if only is not None and not any(only.lower() in name.lower() for name in check_names()):
        raise ValueError(
            f"--only {only!r} matches no check's name: give part of one of them ("
            + "; ".join(check_names())
            + ")"
        )
    dev = torch.device("meta") if device == "meta" else resolve_device(device, 0, "--device")
    results: list[Result] = []
    trained: dict[str, object] = {}  # training check name -> its model (None if it failed)

    def check(name: str, fn: Callable, needs_values: bool = True, needs: str | None = None) -> None:
        """Run (or skip) one check; `needs`: the training check whose model it uses."""
        if only is not None and only.lower() not in name.lower():
            return
        reason = skip_reason(name, dev, compile, needs_values)
        if reason is None and needs is not None and trained.get(needs) is None:
            reason = f"needs the model of '{needs}', which did not run or failed"
        result, value = (Result(name, "skip", 0.0, reason), None) if reason else _timed(name, fn)
        results.append(result)
        report(result.line())
        trained[name] = value

    label = torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type
    report(f"tapernorm selftest on {label} (torch {torch.__version__}, training dtype {dtype})")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tapernorm-selftest-") as tmp:
        data, init = Path(tmp) / "data", Path(tmp) / "gpt2-init"
        write_random_shards(data)
        save_gpt2_init(init)

        def config(c: TrainCheck) -> RunConfig:
            return c.config(str(data), dev.type, dtype, str(init))

        for c in TRAIN_CHECKS:
            check(c.name, lambda c=c: train_check(config(c), dev), needs_values=False)
        check(LOOP, lambda: loop_check(config(DECODED), Path(tmp) / "loop"))
        for c in FOLDED:
            check(fold_name(c), partial(fold_check, trained, c.name, dev), needs=c.name)
        for mode in DECODE_MODES:
            decode = partial(decode_check, trained, DECODED.name, dev, mode)
            check(decode_name(mode), decode, mode == "compiled", DECODED.name)
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skip")}
    failed = ", ".join(r.name for r in results if r.status == "fail")
    report(
        f"selftest on {dev.type}: {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['skip']} skipped in {time.perf_counter() - start:.1f} s"
        + (f"; FAILED: {failed}" if failed else "")
    )
    return results
