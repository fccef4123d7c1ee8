"""The runs as a sheet: one row per run that rule train can train in this config (every run of
Plan.training()'s families), with its config resolved once, here, and what its job asks for.
`tapernorm runs-sheet` prints it; rule train's params and resources read its rows."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

from ..config.run import RunConfig
from . import priorities
from .plan import Plan


@dataclass(frozen=True)
class RunRow:
    """One training run: its family and name, what its config says of it, the trunk it branches
    from ("" where it trains from step 0), its job's device, GPUs, minutes (None: the profile's
    default) and priority, and `config`, what `tapernorm train --config-json` takes."""

    family: str
    run: str
    variant: str
    width: int
    seed: int
    data_seed: int | None
    steps: int
    trunk: str
    device: str
    gpus: int
    minutes: int | None
    priority: int
    config: RunConfig

    @property
    def config_sha256(self) -> str:
        return hashlib.sha256(self.config.to_json().encode()).hexdigest()


# the sheet's columns: every field but the config, which its sha256 stands for
COLUMNS = (*(f.name for f in fields(RunRow) if f.name != "config"), "config_sha256")


def runs_sheet(plan: Plan) -> list[RunRow]:
    """Every run of the plan's training families, in family and run order, its config as the plan
    resolved it (Plan.run_configs), branching from its trunk, if any."""
    rows = []
    for fam in plan.training():
        for run in fam.runs():
            cfg = plan.trunks.with_trunk(fam.name, run, plan.run_configs[fam.name, run])
            rows.append(
                RunRow(
                    family=fam.name,
                    run=run,
                    variant=cfg.variant,
                    width=cfg.model.n_embd,
                    seed=cfg.seed,
                    data_seed=cfg.data_seed,
                    steps=cfg.train.steps,
                    trunk=plan.trunks.of(fam.name, run) or "",
                    device=fam.device,
                    gpus=fam.gpus(run),
                    minutes=fam.minutes(cfg),
                    priority=priorities.training(cfg),
                    config=cfg,
                )
            )
    return rows


def sheet_tsv(rows: list[RunRow]) -> str:
    """The sheet as TSV: a header of COLUMNS, then a line per row (None: an empty cell)."""
    lines = [COLUMNS] + [tuple(getattr(r, c) for c in COLUMNS) for r in rows]
    return "".join("\t".join("" if v is None else str(v) for v in line) + "\n" for line in lines)
