"""--config-json of prepare-data, prepare-eval and bench forward|decode: a config's section parses to
the same settings as the equivalent options, an option given beside it replaces its key, a bad key
is refused in one line; the defaults are the schema's, stated once."""

import json
from pathlib import Path

import pytest
import yaml

from tapernorm import config, fold
from tapernorm.analysis import paper
from tapernorm.bench.settings import BenchSettings, bench_settings
from tapernorm.cli import build_parser, main
from tapernorm.cli.bench import inference_settings
from tapernorm.cli.data import data_settings, eval_settings
from tapernorm.workflow import Plan, validate_pipeline_config
from tapernorm.workflow.files import finetune_data_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
CONFIGS = ["config.yaml", "ci.yaml", "paper.yaml"]


def parse(argv: list[str]):
    return build_parser().parse_args(argv)


@pytest.fixture(scope="module", params=CONFIGS)
def cfg(request) -> dict:
    """A config as the workflow reads it: loaded, validated, defaults filled in."""
    raw = config.yaml_load((ROOT / "config" / request.param).read_text())
    return validate_pipeline_config(raw, SCHEMA)


def option(key: str) -> str:
    return "--" + key.replace("_", "-")


def data_flags(data: dict) -> list[str]:
    """Every key of a data: section as prepare-data's options."""
    argv = []
    for key, value in data.items():
        if key == "byte_fallback":
            argv.append("--byte-fallback" if value else "--no-byte-fallback")
        elif value is not None:
            argv += [option(key), str(value)]
    return argv


def test_the_package_reads_the_workflows_schema():
    linked = config.section_schema("bench")
    workflow = yaml.safe_load(Path(SCHEMA).read_text())["definitions"]["bench"]
    assert {k: v for k, v in linked.items() if k != "definitions"} == workflow


@pytest.mark.parametrize("which", ["data", "finetune"])
def test_prepare_data_config_json_is_the_options(cfg, which):
    data = cfg["data"] if which == "data" else finetune_data_config(cfg)  # the rules' sections
    from_json = data_settings(parse(["prepare-data", "--config-json", json.dumps(data)] + OUT))
    from_flags = data_settings(parse(["prepare-data", *data_flags(data)] + OUT))
    assert from_json == from_flags
    assert {key: from_json[key] for key in data} == data  # the fine-tuning keys are a subset
    assert from_json == config.validate_section(data, "data", "test")


OUT = ["--out", "out"]


def test_prepare_data_options_replace_the_json_and_defaults_are_the_schemas():
    given = json.dumps({"corpus": "tinystories", "vocab_size": 300, "byte_fallback": False})
    argv = ["prepare-data", "--config-json", given, "--vocab-size", "128", "--byte-fallback"]
    data = data_settings(parse(argv + OUT))
    assert (data["corpus"], data["vocab_size"], data["byte_fallback"]) == ("tinystories", 128, True)
    assert data_settings(parse(["prepare-data", *OUT])) == config.section_defaults("data")
    workflow = yaml.safe_load(Path(SCHEMA).read_text())["properties"]["data"]["properties"]
    assert config.section_defaults("data")["vocab_size"] == workflow["vocab_size"]["default"]


def eval_flags(ev: dict, name: str) -> list[str]:
    argv = ["--row-len", str(ev["row_len"])]
    argv += ["--max-rows", "all" if ev["max_rows"] is None else str(ev["max_rows"])]
    local = ev["local_paths"].get(name)
    return argv + (["--local-path", local] if local else [])


def test_prepare_eval_config_json_is_the_options(cfg):
    ev = cfg["finetune"]["eval"]
    for name in ev["sets"]:
        head = ["prepare-eval", "--set", name, *OUT]
        from_json = eval_settings(parse([*head, "--config-json", json.dumps(ev)]))
        assert from_json == eval_settings(parse([*head, *eval_flags(ev, name)]))
        assert (from_json["row_len"], from_json["max_rows"]) == (ev["row_len"], ev["max_rows"])
        assert from_json["local_path"] == ev["local_paths"].get(name)


def test_prepare_eval_options_replace_the_json():
    given = json.dumps({"row_len": 64, "max_rows": 5, "local_paths": {"pile": "/a"}})
    head = ["prepare-eval", "--set", "pile", *OUT, "--config-json", given]
    assert eval_settings(parse(head)) == {"row_len": 64, "max_rows": 5, "local_path": "/a"}
    argv = [*head, "--max-rows", "all", "--row-len", "32", "--local-path", "/b"]
    assert eval_settings(parse(argv)) == {"row_len": 32, "max_rows": None, "local_path": "/b"}
    defaults = config.section_defaults("finetune.eval")
    plain = eval_settings(parse(["prepare-eval", "--set", "heldout", *OUT]))
    assert plain == {"row_len": defaults["row_len"], "max_rows": defaults["max_rows"]} | {
        "local_path": None
    }


def bench_flags(bench: dict, which: str) -> list[str]:
    """A bench: section as bench forward|decode's options."""
    argv = ["--device", bench["device"], "--dtype", bench["dtype"]]
    argv += ["--random", bench["random"]] if bench["random"] else []
    for key, value in bench[which].items():
        values = value if isinstance(value, list) else [value]
        argv += [option(key), *map(str, values)]
    return argv


@pytest.mark.parametrize("which", ["forward", "decode"])
def test_bench_config_json_is_the_options(cfg, which):
    bench = cfg["bench"]
    head = ["bench", which, "--threads", "2", "--out", f"{which}.csv"]
    from_json = inference_settings(parse([*head, "--config-json", json.dumps(bench)]))
    from_flags = inference_settings(parse([*head, *bench_flags(bench, which)]))
    assert from_json.grid(which) == from_flags.grid(which)
    assert from_json == BenchSettings.from_section(bench)
    assert (from_json.device, from_json.dtype, from_json.random) == (
        from_flags.device,
        from_flags.dtype,
        from_flags.random,
    )
    # the section without the other benchmark's grid, as rule bench_<which> passes it
    job = json.dumps(Plan(cfg).bench.job_config(which))
    from_job = inference_settings(parse([*head, "--config-json", job]))
    assert from_job.grid(which) == from_json.grid(which)
    assert (from_job.device, from_job.dtype, from_job.random) == (
        bench["device"],
        bench["dtype"],
        bench["random"],
    )


def test_bench_options_replace_the_json():
    given = {"device": "cuda", "random": "d64", "decode": {"batch_sizes": [1, 2], "repeats": 4}}
    argv = ["bench", "decode", "--config-json", json.dumps(given), "--batch-sizes", "3"]
    settings = inference_settings(parse([*argv, "--device", "cpu", "--random", "d32"]))
    assert (settings.device, settings.random) == ("cpu", "d32")
    assert settings.decode.batch_sizes == (3,) and settings.decode.repeats == 4
    defaults = config.section_defaults("bench")
    assert settings.decode.modes == tuple(defaults["decode"]["modes"])
    assert inference_settings(parse(["bench", "forward"])) == bench_settings()
    assert bench_settings().forward.seq_lens == tuple(defaults["forward"]["seq_lens"])


@pytest.mark.parametrize(
    "argv, key",
    [
        (["bench", "forward", "--config-json", '{"forward": {"batch_size": [1]}}'], "batch_size"),
        (["bench", "decode", "--config-json", '{"dtype": "int8"}'], "bench.dtype"),
        (["prepare-data", *OUT, "--config-json", '{"vocab": 64}'], "data.vocab"),
        (["prepare-data", *OUT, "--config-json", '{"vocab_size": 2}'], "data.vocab_size"),
        (["prepare-eval", "--set", "pile", *OUT, "--config-json", '{"rows": 3}'], "eval.rows"),
        (["prepare-data", *OUT, "--config-json", "[1]"], "top level must be an object"),
        (["prepare-data", *OUT, "--config-json", "{corpus"], "not valid JSON"),
    ],
)
def test_a_bad_config_json_is_refused_in_one_line(argv, key, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--config-json" in err and key in err, err
    if "batch_size" in key:
        assert "config key bench.forward.batch_size: unknown key" in err


def test_the_fold_tolerance_is_stated_once():
    assert config.section_defaults("fold")["rtol"] == fold.FOLD_RTOL == paper.FOLD_RTOL
    fold_cmd = parse(["fold", "--model", "m", "--data", "d", "--out", "o"])
    assert fold_cmd.rtol == fold.FOLD_RTOL


def test_an_unset_taper_start_is_the_end_of_the_warmup():
    given = ["data.dir=d", "train.steps=20", "train.warmup_steps=5"]
    assert config.load_run_config(None, given).taper.start == 5
    assert config.load_run_config(None, [*given, "taper.start=3"]).taper.start == 3
