"""RunConfig: one training run's settings, typed and frozen, one dataclass per section.

Built once, by config.load.resolve_run_config (the run schema's validation, defaults and checks), and
read everywhere a run's settings are read: the workflow's families, `tapernorm train`, the loop,
the run's identity. `to_dict` is what the run's config.json, its checkpoint identity and the
workflow's `--config-json` hold: every key the schema defaults, in this module's field order (the
run schema's, with the top level ordered as the pre-training runs always wrote it), and the keys
without a default (OPTIONAL below) only where set. `from_dict` reads such a dict back unvalidated
(the GPU selftest, which runs without jsonschema, builds complete configs itself).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..runtime.jsonio import dumps

OPTIONAL = "optional"  # field metadata: absent from the dict when None (no default in the schema)
KEY = "key"  # field metadata: the dict's key, where it is not the field's name


def _optional(default: Any = None) -> Any:
    return field(default=default, metadata={OPTIONAL: True})


class _Section:
    def to_dict(self) -> dict:
        """This section as config.json holds it (OPTIONAL fields left out while None)."""
        return to_dict(self)


@dataclass(frozen=True, kw_only=True)
class DataSection(_Section):
    dir: str  # token shards: train.bin, val.bin, meta.json
    train_tokens: int | None  # train on the first N training tokens only (None: all)


@dataclass(frozen=True, kw_only=True)
class ModelSection(_Section):
    """The run's model settings (model.GPTConfig's fields that a config may set)."""

    style: str  # llama | gpt2
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int | None  # None: the data's
    block_size: int
    taper: str  # none | internal | final | all
    norm: str | None = _optional()  # None: the style's norms (model.GPTConfig's "default")
    dyt_alpha_attn: float | None = _optional()
    dyt_alpha_other: float | None = _optional()
    dyt_bias: bool | None = _optional()
    emb_scale: float | None = _optional()
    n_kv_head: int | None
    mlp: str | None = _optional()  # None: the style's MLP (llama SwiGLU, gpt2 GELU)
    mlp_hidden: int | None
    bias: bool | None
    tie_embeddings: bool
    norm_eps: float
    rope_theta: float

    def gpt_fields(self, vocab_size: int) -> dict:
        """model.GPTConfig's keyword arguments; `vocab_size` (the data's) where none is set."""
        return {**self.to_dict(), "vocab_size": self.vocab_size or vocab_size}

    @property
    def norm_name(self) -> str:
        """What the norms are (model.GPTConfig.norm): "default" (the style's), dyt or fakeln."""
        return self.norm or "default"


@dataclass(frozen=True, kw_only=True)
class InitSection(_Section):
    source: str | None = field(metadata={KEY: "from"})  # None: random init; see the run schema
    trunk: str | None = _optional()  # a trunk directory to branch from (training/trunk.py)


@dataclass(frozen=True, kw_only=True)
class TrainSection(_Section):
    steps: int
    batch_size: int
    grad_accum: int
    lr: float
    min_lr: float
    warmup_steps: int
    betas: tuple[float, float]
    weight_decay: float
    grad_clip: float  # 0: no clipping
    device: str
    dtype: str
    compile: bool

    @property
    def clip(self) -> float:
        """The gradient-norm clip: grad_clip, or no clip (inf) for 0."""
        return self.grad_clip if self.grad_clip > 0 else float("inf")


@dataclass(frozen=True, kw_only=True)
class TaperSection(_Section):
    """The gate's window (Eq. 3): g = 1 up to step `start`, 0 from step `end`."""

    start: int  # the one place the taper start lives: resolve_run_config fills it in
    end: int
    ema_mu: float
    delta: float


@dataclass(frozen=True, kw_only=True)
class FakeLNSection(_Section):
    start: int
    end: int
    ema_mu: float


@dataclass(frozen=True, kw_only=True)
class AnchorSection(_Section):
    enabled: bool  # the fixed-target scale loss (Eq. 5)
    lam: float
    form: str  # eq5 | relative


@dataclass(frozen=True, kw_only=True)
class LogSection(_Section):
    every: int
    eval_every: int  # 0: evaluate only at the end
    eval_windows: int
    eval_batch_size: int
    ckpt_every: int
    geometry: bool
    tensorboard: bool | None = _optional()  # None (absent): no TensorBoard view


@dataclass(frozen=True, kw_only=True)
class RunConfig(_Section):
    """One run's resolved config (the run schema, src/tapernorm/schemas/run.schema.yaml)."""

    name: str
    seed: int
    # the order of the training batches, where it is not `seed`'s (a study that crosses init seeds
    # with data orders); absent: `seed` draws both
    data_seed: int | None = _optional()
    variant: str | None
    data: DataSection
    model: ModelSection
    train: TrainSection
    taper: TaperSection
    fakeln: FakeLNSection | None = _optional()  # model.norm fakeln only
    anchor: AnchorSection
    log: LogSection
    meta: Mapping[str, Any]  # free-form labels copied to config.json
    init: InitSection

    @classmethod
    def from_dict(cls, config: Mapping) -> RunConfig:
        """The RunConfig of a complete resolved config dict (to_dict's); not validated."""
        return _from_dict(cls, config, "")

    @property
    def data_order_seed(self) -> int:
        """The seed of the training batches' order (training.run.batch_generator)."""
        return self.seed if self.data_seed is None else self.data_seed

    def to_json(self) -> str:
        """The JSON `tapernorm train --config-json` takes (the workflow's job parameter)."""
        return dumps(self.to_dict())

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get(KEY, f.name)


def _from_dict(cls: type, value: Any, where: str) -> Any:
    label = where or "<top level>"
    if not isinstance(value, Mapping):
        raise ValueError(f"config key {label}: must be a mapping, not {type(value).__name__}")
    fields = {_key(f): f for f in dataclasses.fields(cls)}
    unknown = [k for k in value if k not in fields]
    if unknown:
        raise ValueError(f"config key {where + '.' if where else ''}{unknown[0]}: unknown key")
    kwargs = {}
    for key, f in fields.items():
        path = f"{where}.{key}" if where else key
        if key not in value:
            if not f.metadata.get(OPTIONAL):
                raise ValueError(f"config key {path}: missing (a resolved config has every key)")
            continue
        if value[key] is None and f.metadata.get(OPTIONAL):
            continue  # an older record's spelling of absent
        kwargs[f.name] = _field_value(cls, f.name, value[key], path)
    return cls(**kwargs)


SECTIONS = {
    "data": DataSection,
    "model": ModelSection,
    "train": TrainSection,
    "taper": TaperSection,
    "fakeln": FakeLNSection,
    "anchor": AnchorSection,
    "log": LogSection,
    "init": InitSection,
}


def _field_value(cls: type, name: str, value: Any, path: str) -> Any:
    if cls is RunConfig and name in SECTIONS:
        return _from_dict(SECTIONS[name], value, path)
    if cls is RunConfig and name == "meta":
        return MappingProxyType(copy.deepcopy(dict(value)))
    if cls is TrainSection and name == "betas":
        return tuple(value)
    return value


def to_dict(section: Any) -> dict:
    """A section (or the RunConfig) as the dict config.json holds: sections nested, tuples as
    lists, OPTIONAL fields left out while None."""
    out = {}
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if value is None and f.metadata.get(OPTIONAL):
            continue
        if dataclasses.is_dataclass(value):
            value = to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = copy.deepcopy(dict(value))
        out[_key(f)] = value
    return out


def optional_keys() -> list[tuple[str, ...]]:
    """The (section, key) or (key,) paths of the OPTIONAL fields: absent from a dict when unset.
    An older config.json may hold one as null; it means the same as absent."""
    paths = [(f.name,) for f in dataclasses.fields(RunConfig) if f.metadata.get(OPTIONAL)]
    for name, section in SECTIONS.items():
        paths += [(name, _key(f)) for f in dataclasses.fields(section) if f.metadata.get(OPTIONAL)]
    return paths
