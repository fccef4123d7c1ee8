"""The inference benchmarks (Table 3, the decode table, fig5, claim 7): which pre-training runs
they time, what they wait for, the GPUs they hold."""

from __future__ import annotations

import re
from pathlib import Path

from ..config import ConfigError
from ..variants import VARIANTS, benched, variants_with
from .devices import job_gpus
from .names import model_files, run_dir, run_name

# the variants' `bench` roles (tapernorm.variants): always timed (the baseline, and the tapered run
# exported), timed too when pretrain.variants has it (DyT)
BENCH_VARIANTS = benched("always")
BENCH_OPTIONAL = benched("if_trained")
BENCH_KINDS = ("forward", "decode")  # results/bench/<kind>.csv of rule bench_<kind>
# `tapernorm bench` option -> the variant of the timed run it names
BENCH_MODEL_OPTIONS = tuple((VARIANTS[v]["bench"]["option"], v) for v in variants_with("bench"))


class Bench:
    """The `bench` section of a config: the timed runs (or random-weight models) and the grid."""

    def __init__(self, config: dict, figure_width: int) -> None:
        self.config = config
        self.section = config["bench"]
        self.width = figure_width

    def runs(self) -> dict[str, str]:
        """{variant: run name} of the pretrain runs timed: each of BENCH_VARIANTS, and of
        BENCH_OPTIONAL those in pretrain.variants, at the figure width, seed 0."""
        variants = self.config["pretrain"]["variants"]
        wanted = [*BENCH_VARIANTS, *(v for v in BENCH_OPTIONAL if v in variants)]
        return {variant: run_name(variant, self.width, 0) for variant in wanted}

    def run_dirs(self) -> dict[str, str]:
        """{variant: run directory} of the timed runs; none with bench.random."""
        if self.section.get("random"):
            return {}
        return {v: run_dir("pretrain", name) for v, name in self.runs().items()}

    def inputs(self) -> dict[str, str]:
        """What the benchmark rules wait for: the timed runs' eval.json and the tapered run's fold
        verification (a failed one stops the benchmarks; one skipped because the run diverged does
        not: `tapernorm bench` reads each run's eval.json and times the others); nothing with
        bench.random."""
        runs = self.run_dirs()
        if not runs:
            return {}
        inputs = {
            "baseline": f"{runs['baseline']}/eval.json",
            "tapered": f"{runs['internal_aux']}/eval.json",
            "verify": f"results/fold/{self.runs()['internal_aux']}/verify.json",
        }
        if "dyt" in runs:
            inputs["dyt"] = f"{runs['dyt']}/eval.json"
        return inputs

    def job_inputs(self) -> dict[str, str]:
        """inputs(), and the model files that the benchmarks load from each timed run (named
        <input>_config, <input>_model)."""
        inputs = self.inputs()
        for key, path in list(inputs.items()):
            if Path(path).name == "eval.json":
                inputs |= model_files(str(Path(path).parent), prefix=f"{key}_")
        return inputs

    def model_options(self) -> str:
        """The timed runs' directories as `tapernorm bench` options, each with a trailing space;
        "" with bench.random (the --config-json section carries it)."""
        runs = self.run_dirs()
        return "".join(f"--{opt} {runs[v]} " for opt, v in BENCH_MODEL_OPTIONS if v in runs)

    def job_config(self, kind: str) -> dict:
        """The `bench:` section as rule bench_<kind> passes it (--config-json, a params value):
        device, dtype, random and the grid of `kind` only, so that a change to the other
        benchmark's grid does not rerun this one (the command fills in the grid it is not given
        with its defaults, and does not read it)."""
        return {k: v for k, v in self.section.items() if k == kind or k not in BENCH_KINDS}

    def csvs(self) -> list[str]:
        return [f"results/bench/{kind}.csv" for kind in BENCH_KINDS]

    @property
    def device(self) -> str:
        return self.section["device"]

    def gpus(self) -> int:
        return job_gpus(self.device, None, "bench.device")

    def validate(self) -> None:
        missing = [v for v in BENCH_VARIANTS if v not in self.config["pretrain"]["variants"]]
        if missing and not self.section.get("random"):
            raise ConfigError(
                f"config key bench: the benchmarks time pretrain runs {list(BENCH_VARIANTS)}, but "
                f"pretrain.variants lacks {missing} (set bench: null to skip the benchmarks)"
            )
        model, b = self.config["pretrain"]["model"], self.section
        if model["style"] == "gpt2" and not b.get("random"):  # learned positions: no longer context
            block = model["block_size"]
            if max(b["forward"]["seq_lens"]) > block:
                raise ConfigError(
                    f"config key bench.forward.seq_lens: longer than block_size {block}"
                )
            if max(b["decode"]["prompt_lens"]) + b["decode"]["new_tokens"] > block:
                raise ConfigError(
                    f"config key bench.decode: prompt_lens + new_tokens exceed block_size {block}"
                )


def newest_gpu_check(root: str | Path = "results/gpu") -> str | None:
    """env.json of the newest first-GPU check committed under `root` (directories named
    <device>-<YYYY-MM-DD>, by date, then name; benchmarks/README.md), or None where there is none."""
    checks = [
        (m[1] if (m := re.search(r"(\d{4}-\d{2}-\d{2})$", d.name)) else "", d.name, d)
        for d in Path(root).glob("*")
        if (d / "env.json").is_file()
    ]
    return str(max(checks)[2] / "env.json") if checks else None
