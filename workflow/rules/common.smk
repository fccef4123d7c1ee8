import json
import os

from tapernorm import pipeline as tp

# Validate (and complete with defaults) before any job runs; errors name the offending key.
config.update(
    tp.validate_pipeline_config(
        config, f"{workflow.basedir}/workflow/schemas/config.schema.yaml"
    )
)

PRETRAIN_DATA = "data/pretrain"
FIG_WIDTH = tp.figure_width(config)
FAMILIES = ["pretrain"] + (["ablation"] if config["ablation"] else [])


wildcard_constraints:
    family="|".join(FAMILIES),
    run=r"[a-z_]+-d\d+-s\d+",


def run_dir(family, name):
    return f"results/runs/{family}/{name}"


def evals(family, names):
    return [f"{run_dir(family, n)}/eval.json" for n in names]


def pretrain_evals(width=None, variants=None):
    names = tp.family_runs(config, "pretrain", width)
    if variants is not None:
        names = [n for n in names if tp.parse_run_name(n)[0] in variants]
    return evals("pretrain", names)


def ablation_evals():
    return (
        evals("ablation", tp.family_runs(config, "ablation"))
        if config["ablation"]
        else []
    )


def fold_names():
    return [tp.run_name(v, FIG_WIDTH, 0) for v in config["fold"]["variants"]]


def dirs_of(paths):
    """Run directories of a list of eval.json paths (for --runs)."""
    return " ".join(p.rsplit("/", 1)[0] for p in paths)


FIGURES = {
    "fig1_gate_schedule": pretrain_evals(FIG_WIDTH, ["internal_aux"])[:1],
    "fig2_train_loss": pretrain_evals(FIG_WIDTH, ["baseline", "internal_aux"]),
    "fig3_logit_norm": pretrain_evals(FIG_WIDTH),
    "fig4_grad_norms": pretrain_evals(FIG_WIDTH),
}
if config["ablation"]:
    FIGURES["fig6_scale_anchor"] = ablation_evals()

ALL_TARGETS = (
    [f"figures/{name}.{ext}" for name in FIGURES for ext in ("pdf", "png")]
    + [
        f"results/tables/table{n}.{ext}"
        for n in (1, 2, 5)
        for ext in ("csv", "md", "tex")
    ]
    + ["results/claims.md"]
)
