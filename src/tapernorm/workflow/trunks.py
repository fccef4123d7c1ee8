"""The trunks of the default's training runs (training/trunk.py): the runs of the pretrain,
ablation and anchor_sweep families that differ only in their variant (and the scale loss's weight
and form) share their steps before the taper, which rule trunk trains once into
results/trunks/<name>/ and each of them branches from (`init.trunk`). A trunk is made only where
at least two runs share it."""

from __future__ import annotations

import dataclasses
import hashlib
from functools import cached_property

from ..config.run import RunConfig
from ..runtime.jsonio import dumps
from ..training.identity import config_identity
from ..training.trunk import RECORD as TRUNK_RECORD
from ..training.trunk import trunk_config

TRUNK_ROOT = "results/trunks"


class Trunks:
    """Which trunk each of `runs` (family, run, its resolved config) branches from, and each
    trunk's first run (whose config `tapernorm train --trunk` takes)."""

    def __init__(self, runs: list[tuple[str, str, RunConfig]]) -> None:
        self.runs = runs

    @cached_property
    def _plan(self) -> tuple[dict[tuple[str, str], str], dict[str, tuple[str, str]]]:
        groups: dict[str, list[tuple[str, str, RunConfig]]] = {}
        for family, run, cfg in self.runs:
            trunk = trunk_config(cfg)
            if trunk is not None:  # (the data's path is not part of a trunk's identity)
                key = dumps(config_identity(trunk.to_dict()))
                groups.setdefault(key, []).append((family, run, cfg))
        of: dict[tuple[str, str], str] = {}
        first: dict[str, tuple[str, str]] = {}
        for key, members in groups.items():
            if len(members) < 2:
                continue
            family, run, cfg = members[0]
            name = f"{family}-d{cfg.model.n_embd}-s{cfg.seed}"
            if cfg.data_seed is not None:  # (a study crossing init seeds with data orders)
                name += f"-o{cfg.data_seed}"
            if name in first:  # another trunk of that width and seed (another LR, say)
                name += "-" + hashlib.sha256(key.encode()).hexdigest()[:8]
            first[name] = (family, run)
            of.update({(f, r): name for f, r, _ in members})
        return of, first

    def of(self, family: str, run: str) -> str | None:
        """The trunk that run `run` of `family` branches from (None: it trains from step 0)."""
        return self._plan[0].get((family, run))

    def names(self) -> list[str]:
        return list(self._plan[1])

    def first_run(self, name: str) -> tuple[str, str]:
        """The family and run whose config `tapernorm train --trunk` is given for trunk `name`."""
        try:
            return self._plan[1][name]
        except KeyError:
            raise ValueError(f"no trunk {name!r} in this config") from None

    def with_trunk(self, family: str, run: str, cfg: RunConfig) -> RunConfig:
        """Run config `cfg` of `run`, branching from its trunk where it has one."""
        name = self.of(family, run)
        if name is None:
            return cfg
        return cfg.replace(init=dataclasses.replace(cfg.init, trunk=trunk_dir(name)))


def trunk_dir(name: str) -> str:
    return f"{TRUNK_ROOT}/{name}"


def trunk_files(name: str) -> dict[str, str]:
    """What rule trunk makes: the trunk's checkpoint (what a branching run reads) and its record,
    written last."""
    ckpt = f"{trunk_dir(name)}/ckpt"
    return {
        "state": f"{ckpt}/state.json",
        "tensors": f"{ckpt}/state.safetensors",
        "metrics": f"{ckpt}/metrics.jsonl",
        "record": f"{trunk_dir(name)}/{TRUNK_RECORD}",
    }
