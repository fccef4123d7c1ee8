"""The order in which Snakemake starts ready jobs: each rule's `priority:`.

Whenever cores free up, Snakemake's scheduler starts the ready jobs of the highest priority that fit
them. On a machine of few cores that order decides how long a core sits idle, so (highest first):

- a scaling record right after its run: a part's records are there to commit as it goes;
- the short all-core data preparations that everything else waits for, so training starts at once;
- the benchmarks, which take the machine alone wherever they run: first, rather than wherever two
  cores happen to be free at once (measured: alone at the end of the run, or waiting behind a
  single-core job while the other core idles);
- the fine-tuning base run, which a chain of fine-tuning jobs waits for;
- training runs longest first (longest processing time first: the short ones fill the cores at
  the end, so that the cores finish together);
- everything else (evaluations, folds, figures, tables) as it becomes ready.
"""

from __future__ import annotations

import math

from ..run_config import RunConfig

RECORD = 4000
PREPARE = 3000
BENCH = 2000
GATE = 1000
# training runs: 10 * log2 of their work, so that a run of 7% more work goes first, every training
# run staying below GATE
TRAINING_MAX = GATE - 1


def training_work(cfg: RunConfig) -> int:
    """A run's training work: steps x tokens a step x layers x width, what orders runs by length
    (not a time)."""
    t = cfg.train
    return (
        t.steps
        * t.batch_size
        * t.grad_accum
        * cfg.model.block_size
        * cfg.model.n_layer
        * cfg.model.n_embd
    )


def training(cfg: RunConfig) -> int:
    """A training job's priority: longer runs first, below the GATE tier."""
    return min(TRAINING_MAX, max(1, round(10 * math.log2(max(training_work(cfg), 1)))))
