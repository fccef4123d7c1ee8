"""The command line: eval and fold on a trained run, clear errors on bad input, each command's
options (bench's per benchmark) and the command lines the workflow and the GPU check build."""

import json
import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_run

from tapernorm import set_gate
from tapernorm.cli import build_parser, main
from tapernorm.cli.bench import inference_settings
from tapernorm.training.checkpoint import load_model
from tapernorm.training.loop import train
from tapernorm.workflow import Plan, validate_pipeline_config

ROOT = Path(__file__).resolve().parents[1]


def test_fold_and_eval_commands(shards_dir, tmp_path, capsys):
    train(tiny_run(shards_dir, variant="all_aux", train={"steps": 12}), tmp_path / "run")
    out = tmp_path / "fold"
    assert (
        main(
            [
                "fold",
                "--model",
                str(tmp_path / "run"),
                "--data",
                str(shards_dir),
                "--out",
                str(out),
                "--windows",
                "4",
                "--eval-windows",
                "8",
            ]
        )
        == 0
    )
    verify = json.loads((out / "verify.json").read_text())
    assert verify["folded"]["ok"] and verify["scaled"]["ok"]
    assert abs(verify["val_loss_diff"]) < 1e-4
    reference, folded = load_model(tmp_path / "run"), load_model(out / "folded")
    set_gate(reference, 0.0)
    x = torch.randint(0, reference.config.vocab_size, (2, 16))
    assert torch.allclose(reference.eval()(x), folded(x), atol=1e-5)
    assert not folded.config.tie_embeddings  # the final TaperNorm was folded into the head

    assert (
        main(
            [
                "eval",
                "--model",
                str(out / "folded"),
                "--data",
                str(shards_dir),
                "--windows",
                "8",
                "--out",
                str(tmp_path / "e.json"),
            ]
        )
        == 0
    )
    ev = json.loads((tmp_path / "e.json").read_text())
    assert abs(ev["val_loss"] - verify["val_loss_folded"]) < 1e-5

    # --folded compares on an evaluation set's rows; token shards have none to compare on
    args = ["eval", "--model", str(tmp_path / "run"), "--data", str(shards_dir)]
    assert main([*args, "--folded", str(out / "folded")]) == 2
    assert "--folded needs an evaluation set of prepare-eval" in capsys.readouterr().err


def test_missing_model_is_a_clear_error(shards_dir, tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path / "nope"), "--data", str(shards_dir)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_missing_shards_is_a_clear_error(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"data: {{dir: {tmp_path / 'nodata'}}}\ntrain: {{steps: 5}}\n")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "prepare-data" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_commands_print_library_logs_and_the_logger_can_be_silenced(monkeypatch, capsys):
    """A command shows the library's log records as bare lines on stderr (its result stays on
    stdout), once per call however often main runs; a level set on `tapernorm` silences them."""
    from tapernorm.training import fold_run as fold

    def fold_run(*args, **kwargs):
        logging.getLogger("tapernorm.training.fold_run").info("folding %s", "the run")
        logging.getLogger("tapernorm.training.fold_run").debug("below INFO")
        return {"ok": True}

    monkeypatch.setattr(fold, "fold_run", fold_run)
    argv = ["fold", "--model", "run", "--data", "shards", "--out", "out"]
    logger = logging.getLogger("tapernorm")
    for _ in range(2):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert err == "folding the run\n" and json.loads(out) == {"ok": True}
        assert not logger.handlers and logger.propagate  # as it was before the command
    logger.setLevel(logging.WARNING)
    try:
        assert main(argv) == 0
    finally:
        logger.setLevel(logging.NOTSET)
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out) == {"ok": True}


# ---- the parsers: each command's own options ------------------------------------------------------

ROUNDS = {"--warmup", "--repeats", "--device", "--dtype", "--out", "--force", "--allow-dirty"}
MODELS = {"--baseline", "--tapered", "--dyt", "--random", "--no-dyt", "--n-layer", "--n-head"}
INFERENCE = ROUNDS | MODELS | {"--vocab", "--batch-sizes", "--threads", "--config-json"}
BENCH_OPTIONS = {
    "train-step": ROUNDS
    | {"--n-embd", "--n-layer", "--n-head", "--vocab", "--block-size"}
    | {"--batch-size", "--no-hf", "--with-dyt", "--compile"},
    "forward": INFERENCE | {"--seq-lens"},
    "decode": INFERENCE | {"--prompt-lens", "--new-tokens", "--modes"},
}


def subcommands(parser) -> dict:
    return parser._subparsers._group_actions[0].choices


def help_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("benchmark", list(BENCH_OPTIONS))
def test_bench_help_lists_only_the_benchmarks_options(benchmark, capsys):
    text = help_of(["bench", benchmark], capsys)
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) - {"--help"}
    assert options == BENCH_OPTIONS[benchmark]
    others = set(BENCH_OPTIONS) - {benchmark}
    assert not any(f"{other}:" in text for other in others)  # no "train-step: ..." remarks
    assert "tapernorm bench BENCHMARK --help" in " ".join(help_of(["bench"], capsys).split())


def test_every_command_has_help_and_a_function():
    def walk(parser, prog):
        for name, command in subcommands(parser).items():
            if command._subparsers is not None:
                yield from walk(command, f"{prog} {name}")
            else:
                yield f"{prog} {name}", command

    commands = dict(walk(build_parser(), "tapernorm"))
    assert {"tapernorm bench train-step", "tapernorm bench decode", "tapernorm table"} <= {
        *commands
    }
    for prog, command in commands.items():
        assert command.prog == prog and command.format_help().startswith(f"usage: {prog}")
        assert callable(command.get_default("func")), prog


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "forward", "--no-hf"], "--no-hf is an option of tapernorm bench train-step, "),
        (["bench", "decode", "--batch-size", "4"], "--batch-size is an option of tapernorm bench "),
        (["bench", "train-step", "--threads", "2"], "of tapernorm bench forward and decode, not "),
        (["bench", "train-step", "--random", "d32"], "--random is an option of tapernorm bench f"),
        (["bench", "decode", "--seq-lens", "8", "16"], "of tapernorm bench forward, not of decode"),
        (["bench", "forward", "--modes", "eager"], "--modes is an option of tapernorm bench dec"),
        (["bench", "--device", "cpu", "forward"], "tapernorm bench train-step|forward|decode --d"),
        (["bench", "--no-hf", "train-step"], "after the benchmark's name: tapernorm bench train-"),
    ],
)
def test_a_misplaced_bench_option_is_one_line_naming_its_benchmark(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    prog = "tapernorm bench" + (f" {argv[1]}" if not argv[1].startswith("-") else "")
    assert e.value.code == 2 and len(lines) == 1 and message in lines[0], lines
    assert lines[0].startswith(f"{prog}: error: ") and lines[0].endswith(f"(see {prog} --help)")


def parse(line: str):
    return build_parser().parse_args(shlex.split(line))


@pytest.mark.parametrize("config", ["ci.yaml", "config.yaml", "paper.yaml"])
def test_the_workflows_bench_command_lines_parse(config):
    """The bench jobs' shell commands as Snakemake plans them for each config parse to the
    config's grid and models (the bench: section without the other benchmark's grid as
    --config-json, the timed runs' directories)."""
    raw = yaml.safe_load((ROOT / "config" / config).read_text())
    cfg = validate_pipeline_config(raw, str(ROOT / "workflow/schemas/config.schema.yaml"))
    targets = ["results/bench/forward.csv", "results/bench/decode.csv"]
    argv = ["-m", "snakemake", "-n", "-p", "--forceall", "--cores", "3", *targets]
    plan = subprocess.run(
        [sys.executable, *argv, "--configfile", f"config/{config}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert plan.returncode == 0, plan.stderr[-2000:]
    shells = {
        m[1]: m[0] for m in re.finditer(r"tapernorm bench (\w+) [^\n]*?(?= > logs/)", plan.stdout)
    }
    assert set(shells) == {"forward", "decode"}
    runs = Plan(cfg).bench.run_dirs()
    for which, shell in shells.items():
        args, part = parse(shell.removeprefix("tapernorm ")), cfg["bench"][which]
        assert (args.command, args.which, args.threads) == ("bench", which, 3)
        assert args.out == Path(f"results/bench/{which}.csv") and not hasattr(args, "no_hf")
        other = "decode" if which == "forward" else "forward"  # (not this job's: rerun triggers)
        assert json.loads(args.config_json) == {k: v for k, v in cfg["bench"].items() if k != other}
        assert {v: str(getattr(args, k)) for k, v in _BENCH_RUNS if getattr(args, k)} == {
            v: d for v, d in runs.items()
        }
        settings = inference_settings(args)
        grid = settings.forward if which == "forward" else settings.decode
        assert (settings.device, settings.dtype) == (cfg["bench"]["device"], cfg["bench"]["dtype"])
        assert (list(grid.batch_sizes), grid.warmup, grid.repeats) == (
            part["batch_sizes"],
            part["warmup"],
            part["repeats"],
        )
        lengths = grid.seq_lens if which == "forward" else grid.prompt_lens
        assert list(lengths) == part["seq_lens" if which == "forward" else "prompt_lens"]
        assert settings.random == cfg["bench"]["random"]
        if which == "decode":
            assert (grid.new_tokens, list(grid.modes)) == (part["new_tokens"], part["modes"])


_BENCH_RUNS = (("baseline", "baseline"), ("tapered", "internal_aux"), ("dyt", "dyt"))


@pytest.mark.parametrize("branch", ["smoke", "gpu"])
def test_the_gpu_checks_bench_command_lines_parse(branch):
    """benchmarks/gpu_check.sh's bench steps, with its arrays of either branch (--smoke or not)."""
    script = (ROOT / "benchmarks/gpu_check.sh").read_text().replace("\\\n", " ")
    smoke, gpu = script.split('if [ "$SMOKE" = 1 ]; then', 1)[1].split("\nfi\n", 1)[0].split("else")
    arrays = dict(re.findall(r"(\w+)=\(([^)]*)\)", smoke if branch == "smoke" else gpu))
    prompt = re.search(r"P_SHORT=(\d+)", smoke if branch == "smoke" else gpu).group(1)
    steps = re.findall(r'"\$\{TN\[@\]\}" (bench .*)', script)
    assert [step.split()[1] for step in steps] == ["train-step", "forward", "decode", "decode"]
    for step in steps:
        step = re.sub(r'"\$\{(\w+)\[@\]\}"', lambda m: " ".join(arrays[m.group(1)].split()), step)
        args = parse(re.sub(r'"\$WORK/[^"]*"', "out.csv", step).replace('"$2"', prompt))
        assert args.out == Path("out.csv")
        assert args.device == ("cpu" if branch == "smoke" else "cuda")
        if args.which == "train-step":
            assert args.no_hf and args.with_dyt and args.dtype == "bfloat16"
        elif args.which == "decode":
            assert args.no_dyt and args.modes in (["eager"], ["compiled"])


def test_check_config_names_the_line_of_a_yaml_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the schema's default path
    assert main(["check-config", "config/ci.yaml", "config/config.yaml"]) == 0
    assert "config/ci.yaml + config/config.yaml: valid" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("pretrain:\n  steps: 10\n  widths: [64\nseed: 1\n")
    assert main(["check-config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "invalid YAML at line 4" in err, err
    twice = tmp_path / "twice.yaml"
    twice.write_text("pretrain:\n  steps: 10\npretrain:\n  steps: 20\n")
    assert main(["check-config", str(twice)]) == 2
    assert "line 3" in capsys.readouterr().err


def test_check_config_checks_the_files_merged_as_the_workflow_reads_them(
    tmp_path, capsys, monkeypatch
):
    """An overlay is checked over the config it goes on (snakemake --configfile A B merges them):
    valid there, incomplete alone; a value the schema refuses fails the merged config, naming its
    key; a file that is no config is named."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert main(["check-config", "config/paper.yaml", "config/rehearsal.yaml"]) == 0
    assert main(["check-config", "config/config.yaml", "config/stability.yaml"]) == 0
    capsys.readouterr()
    assert main(["check-config", "config/stability.yaml"]) == 2
    assert "'pretrain' is a required property" in capsys.readouterr().err
    over = tmp_path / "over.yaml"
    over.write_text("pretrain:\n  seeds: 0\n")
    assert main(["check-config", "config/config.yaml", str(over)]) == 2
    assert "config key pretrain.seeds" in capsys.readouterr().err
    listed = tmp_path / "list.yaml"
    listed.write_text("- pretrain\n")
    assert main(["check-config", "config/config.yaml", str(listed)]) == 2
    assert f"config file {listed}: not a workflow config" in capsys.readouterr().err
