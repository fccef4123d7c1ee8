"""What `tapernorm bench forward|decode` times and how: the config's `bench:` section (its defaults
are the workflow schema's, schemas/config.schema.yaml) as dataclasses, from a --config-json and the
flags given beside it (a flag overrides the section's key)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ..config import section_defaults, validate_section

SECTION = "bench"  # the workflow config's section these settings are
BENCHMARKS = ("forward", "decode")


@dataclass(frozen=True)
class ForwardGrid:
    """bench.forward: one forward pass over B x T tokens per batch size and sequence length."""

    batch_sizes: tuple[int, ...]
    seq_lens: tuple[int, ...]
    warmup: int
    repeats: int

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.seq_lens

    @property
    def positions(self) -> int:
        """The longest context a model is run at."""
        return max(self.seq_lens)


@dataclass(frozen=True)
class DecodeGrid:
    """bench.decode: a prefill of each prompt length, then `new_tokens` greedy steps, per mode."""

    batch_sizes: tuple[int, ...]
    prompt_lens: tuple[int, ...]
    new_tokens: int
    warmup: int
    repeats: int
    modes: tuple[str, ...]

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.prompt_lens

    @property
    def positions(self) -> int:
        return max(self.prompt_lens) + self.new_tokens


GRIDS = {"forward": ForwardGrid, "decode": DecodeGrid}


@dataclass(frozen=True)
class BenchSettings:
    """The `bench:` section: device, dtype, `random` (a width like "d512": random weights at the
    paper's config instead of trained runs) and each benchmark's grid. `random_dyt` and `sizes`
    (GPTConfig fields instead of the paper config's, with `random`) are the command line's only."""

    device: str
    dtype: str
    random: str | None
    forward: ForwardGrid
    decode: DecodeGrid
    random_dyt: bool = True
    sizes: dict = field(default_factory=dict)

    def grid(self, which: str) -> ForwardGrid | DecodeGrid:
        if which not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {which!r}; choose one of {list(BENCHMARKS)}")
        return getattr(self, which)

    @classmethod
    def from_section(cls, section: dict, **extra) -> BenchSettings:
        """From a complete (validated, defaults filled) `bench:` section."""
        grids = {
            which: GRIDS[which](
                **{k: tuple(v) if isinstance(v, list) else v for k, v in section[which].items()}
            )
            for which in BENCHMARKS
        }
        return cls(section["device"], section["dtype"], section["random"], **grids, **extra)

    def replace(self, **changes) -> BenchSettings:
        return dataclasses.replace(self, **changes)


def bench_section(config_json: dict | None = None, source: str = "--config-json") -> dict:
    """The `bench:` section: `config_json` validated with its defaults filled in (ConfigError naming
    `source` and the key), or the defaults alone."""
    if config_json is None:
        return section_defaults(SECTION)
    return validate_section(config_json, SECTION, source)


def bench_settings(
    config_json: dict | None = None,
    overrides: dict | None = None,
    random_dyt: bool = True,
    sizes: dict | None = None,
) -> BenchSettings:
    """BenchSettings of a --config-json section (or the defaults), with `overrides` (dotted keys
    of the section, "device", "forward.batch_sizes", ...; None values are left out: a flag not
    given) replacing its values."""
    section = bench_section(config_json)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        *parents, last = key.split(".")
        node = section
        for part in parents:
            node = node[part]
        if last not in node:
            raise KeyError(f"bench settings have no key {key}")
        node[last] = value
    return BenchSettings.from_section(section, random_dyt=random_dyt, sizes=dict(sizes or {}))


@dataclass(frozen=True)
class BenchRuns:
    """Trained run (or model) directories to time; the tapered one is exported at g=0."""

    baseline: Path | None = None
    tapered: Path | None = None
    dyt: Path | None = None

    def given(self) -> bool:
        return any(p is not None for p in (self.baseline, self.tapered, self.dyt))
