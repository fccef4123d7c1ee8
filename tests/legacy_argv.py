"""The command-line options the workflow rendered from a config section before its rules passed
the section as --config-json (up to commit 859a0ca): the tests check that a command reads a section
and these options to the same settings."""

import shlex

from tapernorm.workflow import Plan


def prepare_data_args(data: dict) -> str:
    """The `tapernorm prepare-data` arguments for the config's `data` section."""
    args = [f"--corpus {data['corpus']}", f"--tokenizer {data['tokenizer']}"]
    if data["tokenizer"] == "sentencepiece":
        args.append(f"--vocab-size {data['vocab_size']}")
        if not data["byte_fallback"]:
            args.append("--no-byte-fallback")
    if data["corpus"] == "tinystories":
        args.append(f"--tinystories {data['tinystories']}")
    for key in ("local_path", "max_docs", "tokenizer_chars"):
        if data[key] is not None:
            args.append(f"--{key.replace('_', '-')} {shlex.quote(str(data[key]))}")
    return " ".join(args)


def finetune_prepare_args(config: dict) -> str:
    """The `tapernorm prepare-data` arguments of the fine-tuning corpus (GPT-2 BPE)."""
    data = config["finetune"]["data"]
    args = [f"--corpus {data['corpus']}", "--tokenizer gpt2"]
    if data["corpus"] == "tinystories":
        args.append(f"--tinystories {data['tinystories']}")
    for key in ("local_path", "max_docs"):
        if data[key] is not None:
            args.append(f"--{key.replace('_', '-')} {shlex.quote(str(data[key]))}")
    return " ".join(args)


def prepare_eval_args(config: dict, eval_set: str, shards_dir: str) -> str:
    """The `tapernorm prepare-eval` arguments of one evaluation set."""
    ev = config["finetune"]["eval"]
    args = [f"--set {eval_set}", f"--row-len {ev['row_len']}"]
    args.append(f"--max-rows {'all' if ev['max_rows'] is None else ev['max_rows']}")
    if eval_set == "heldout":
        args.append(f"--shards {shlex.quote(shards_dir)}")
    elif ev["local_paths"].get(eval_set):
        args.append(f"--local-path {shlex.quote(ev['local_paths'][eval_set])}")
    return " ".join(args)


def bench_model_args(config: dict) -> str:
    """The model arguments of `tapernorm bench forward|decode`: --random dWIDTH, or the timed
    runs' directories (workflow.bench.Bench.run_dirs)."""
    if config["bench"].get("random"):
        return f"--random {config['bench']['random']}"
    run_dirs = Plan(config).bench.run_dirs()
    args = f"--baseline {run_dirs['baseline']} --tapered {run_dirs['internal_aux']}"
    return args + (f" --dyt {run_dirs['dyt']}" if "dyt" in run_dirs else "")


def bench_args(config: dict, which: str) -> str:
    """The grid arguments of `tapernorm bench forward|decode` from the config's `bench` section."""
    b, part = config["bench"], config["bench"][which]
    args = [f"--device {b['device']}", f"--dtype {b['dtype']}"]
    args.append("--batch-sizes " + " ".join(map(str, part["batch_sizes"])))
    if which == "forward":
        args.append("--seq-lens " + " ".join(map(str, part["seq_lens"])))
    else:
        args.append("--prompt-lens " + " ".join(map(str, part["prompt_lens"])))
        args += [f"--new-tokens {part['new_tokens']}", "--modes " + " ".join(part["modes"])]
    args += [f"--warmup {part['warmup']}", f"--repeats {part['repeats']}"]
    return " ".join(args)
