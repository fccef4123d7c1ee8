"""Tables, figures and claims from run directories (runs.py says what a run directory holds).

The registry of every table, figure and the claims (each output's name, rule, builder and caption)
is the workflow's (tapernorm.workflow.outputs); `builder` imports an output's builder from here.
The builders sit in one sub-package per kind:
- tables/: training (Tables 1, 2 and 5, and the table writers), inference (Table 3, the decode
  table), finetune (Tables 4 and 6), job_times (Snakemake's job records per rule);
- figures/: training (figures 1-3, fig6, make_figure), gradients (4, 4b), speedups (5), summary
  (the claims' gaps, the LR grid, the tails), tails, with the shared style and curves;
- claims/: document (claims.md and claims.json), rows (the typed verdicts), numbers, one module per
  group of claims, and the scale card;
- studies/: the scaling, stability, LR grid, anchor sweep and tails studies, and the GPU check's
  report.
What all of them read sits here: runs (load_runs), comparable (the check of what is averaged),
stats (Table 2's outlier rule, paired gaps), rates (blow-up rates), paper (the published numbers),
epochs, speed_rule (every speed verdict), html and report_home. The commands are
tapernorm.cli.analysis'. Nothing is imported here, so `tapernorm` commands that don't draw anything
never load matplotlib.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..workflow.outputs import Output


def builder(output: Output) -> Callable[..., list]:
    """The function that builds `output` (its "module:function" of this package, imported now)."""
    module, _, function = output.builder.partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)
