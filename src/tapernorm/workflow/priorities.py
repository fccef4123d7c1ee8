"""The order in which Snakemake starts ready jobs: each rule's `priority:`.

Whenever cores free up, Snakemake's scheduler starts the ready jobs of the highest priority that fit
them. On a machine of few cores that order decides how long a core sits idle (config/README.md, "Time
of the default run"), so, highest first:

- a scaling record right after its run: a part's records are there to commit as it goes;
- the short data preparations that everything else waits for, so that training starts at once
  (before, the all-core tokenizing of the pre-training data waited for a free machine while one
  core trained the fine-tuning base run and the other idled);
- the benchmarks, which take the machine alone: whenever every core is free at once they go
  first, and otherwise they run once nothing else is left to share the cores;
- the fine-tuning base run, so that the short fine-tuning jobs it gates are ready to fill the
  cores at the end;
- the trunks (the steps before the taper that the runs of a seed share), which those runs wait
  for;
- training runs longest first (longest processing time first), so that the cores finish together;
- the tails battery (rule tails: about a minute of one core on the default, ready once the last
  pre-training run and fold are), before the shorter jobs still waiting at the end;
- everything else (evaluations, folds, fine-tuning runs, figures, tables) as it becomes ready.

Snakemake's scheduler starts the set of ready jobs whose priorities sum highest, so on two cores a
tier must outweigh two jobs of the tiers below it: two trunks at once (2 x 999) yield to an
all-core data preparation (3000) or benchmark (2000). With TRUNK at 1500, two trunks tied the
fine-tuning data's tokenizing, which then waited for a free machine until training ended.
"""

from __future__ import annotations

import math

from ..config.run import RunConfig

RECORD = 4000
PREPARE = 3000
BENCH = 2000
GATE = 1000
TRUNK = GATE - 1
# training runs: 10 * log2 of their work, so that a run of 7% more work goes first, every training
# run staying below TRUNK
TRAINING_MAX = TRUNK - 1
TAILS = 1  # above the jobs of no priority (0); no training run is below it (training: >= 1)


def training_work(cfg: RunConfig) -> int:
    """A run's training work: steps (after its trunk's, if it branches from one) x tokens a step x
    layers x width, what orders runs by length (not a time)."""
    t = cfg.train
    return (
        (t.steps - (cfg.taper.start if cfg.init.trunk else 0))
        * t.batch_size
        * t.grad_accum
        * cfg.model.block_size
        * cfg.model.n_layer
        * cfg.model.n_embd
    )


def training(cfg: RunConfig) -> int:
    """A training job's priority: longer runs first, below the TRUNK tier."""
    return min(TRAINING_MAX, max(1, round(10 * math.log2(max(training_work(cfg), 1)))))
