"""`tapernorm prepare-data` timed at the paper's corpus size, on synthetic corpora.

    python benchmarks/prepare_data_size.py --work DIR [--mb 300] [--workers 1 2] [--seed 0] [--keep]

Writes a TinyStories-like copy (the repository's v2 .txt files) and an OpenWebText-like .jsonl of
--mb MB of training text each (tapernorm.data.synthetic, from --seed), then runs prepare-data on
each as the paper config does (SentencePiece 10k on the first 200M characters; GPT-2 BPE with the
held-out split) under /usr/bin/time -v, once per --workers, and the TinyStories tokenizer's
training alone (a fixed cost: 200M characters whatever the corpus). The process tree (the command, its
forkserver and workers) is sampled every 0.5 s for its summed CPU time and memory: resident (RSS,
pages shared by the forked workers counted in each) and proportional (PSS, each page counted
once: what the machine holds); the machine's other load over the run is reported beside it.
/usr/bin/time's own figures cover the command and the children it waits for, not the workers.
Prints one JSON line per run and a markdown table; the corpora and shards are deleted afterwards
unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tapernorm.data.synthetic import openwebtext_like, write_jsonl, write_tinystories_copy
from tapernorm.runtime import jsonio

PAPER_TOKENIZER_CHARS = 200_000_000  # config/paper.yaml data.tokenizer_chars


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def run_measured(argv: list[str], log_path: Path) -> dict:
    """Run argv under /usr/bin/time -v; sample its process tree's summed RSS and CPU time."""
    cpu_before = psutil.cpu_times()
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["/usr/bin/time", "-v", *argv], stdout=log, stderr=log)
        root = psutil.Process(proc.pid)
        cpu: dict[int, float] = {}
        main_pid = None  # the command itself (the child of /usr/bin/time): it reads and writes
        peak_rss = peak_pss = 0
        while proc.poll() is None:
            rss = pss = 0
            if main_pid is None and root.children():
                main_pid = root.children()[0].pid
            for p in _tree(root):
                try:
                    times = p.cpu_times()
                    cpu[p.pid] = times.user + times.system
                    memory = p.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                rss, pss = rss + memory.rss, pss + memory.pss
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            time.sleep(0.5)
    wall = time.perf_counter() - start
    cpu_after = psutil.cpu_times()
    busy = sum(
        getattr(cpu_after, f) - getattr(cpu_before, f)
        for f in ("user", "nice", "system", "irq", "softirq", "steal")
    )
    text = log_path.read_text()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}); see {log_path}")

    def timed(key: str) -> float:
        return float(re.search(rf"{key}: ([\d.:]+)", text)[1])

    tree_cpu = sum(cpu.values())
    return {
        "wall_s": round(wall, 1),
        "tree_cpu_s": round(tree_cpu, 1),
        "main_cpu_s": round(cpu.get(main_pid, 0.0), 1),
        "time_user_s": timed(r"User time \(seconds\)"),
        "time_sys_s": timed(r"System time \(seconds\)"),
        "time_max_rss_mb": round(timed(r"Maximum resident set size \(kbytes\)") / 1e3),
        "tree_peak_rss_mb": round(peak_rss / 1e6),
        "tree_peak_pss_mb": round(peak_pss / 1e6),
        "other_load_cores": round(max(busy - tree_cpu, 0.0) / wall, 2),
        "log": [
            line
            for line in text.splitlines()
            if re.match(r"(tokenizer|train|val|corpus|held-out split)\b", line)
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--work", type=Path, required=True, help="scratch directory (needs ~4x --mb)")
    p.add_argument("--mb", type=float, default=300, help="MB (1e6 bytes) of training text each")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument(
        "--corpora",
        nargs="+",
        choices=["tinystories", "openwebtext"],
        default=["tinystories", "openwebtext"],
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", action="store_true", help="keep the corpora and shards")
    args = p.parse_args(argv)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    n_bytes = int(args.mb * 1e6)
    tapernorm = [sys.executable, "-m", "tapernorm.cli", "prepare-data"]
    try:
        t = time.perf_counter()
        ts = owt = {}
        if "tinystories" in args.corpora:
            ts = write_tinystories_copy(work / "tinystories", n_bytes, n_bytes // 100, args.seed)
        if "openwebtext" in args.corpora:
            owt = {"train": write_jsonl(work / "owt.jsonl", openwebtext_like(args.seed), n_bytes)}
        print(f"corpora written in {time.perf_counter() - t:.0f} s: {ts} {owt}", flush=True)
        corpora = {
            "tinystories": (
                ts,
                ["--corpus", "tinystories", "--local-path", str(work / "tinystories")]
                + ["--tokenizer", "sentencepiece", "--vocab-size", "10000"]
                + ["--tokenizer-chars", str(PAPER_TOKENIZER_CHARS)],
            ),
            "openwebtext": (
                owt,
                ["--corpus", "openwebtext", "--local-path", str(work / "owt.jsonl")]
                + ["--tokenizer", "gpt2"],
            ),
        }
        rows = []
        if "tinystories" in args.corpora:  # its tokenizer alone: a fixed cost, whatever the corpus
            train_file = work / "tinystories" / "TinyStoriesV2-GPT4-train.txt"
            code = (
                "from tapernorm.data import txt_documents, train_sentencepiece; "
                f"train_sentencepiece(txt_documents({str(train_file)!r}), 10000, "
                f"{str(work / 'tokenizer-only' / 'tokenizer')!r}, "
                f"max_chars={PAPER_TOKENIZER_CHARS})"
            )
            r = run_measured([sys.executable, "-c", code], work / "tokenizer-only.log")
            r.update(corpus="tinystories tokenizer", workers=0, text_mb=PAPER_TOKENIZER_CHARS / 1e6)
            r.update(
                cores_used=round(r["tree_cpu_s"] / r["wall_s"], 2), mb_per_s="", mb_per_cpu_s=""
            )
            rows.append(r)
            print(jsonio.dumps(r), flush=True)
        for name in args.corpora:
            made, corpus_args = corpora[name]
            text_mb = sum(size for _, size in made.values()) / 1e6
            for workers in args.workers:
                out = work / f"shards-{name}-{workers}"
                cmd = [*tapernorm, *corpus_args, "--workers", str(workers), "--out", str(out)]
                load = os.getloadavg()[0]
                r = run_measured(cmd, work / f"{name}-{workers}.log")
                meta = json.loads((out / "meta.json").read_text())
                r.update(
                    corpus=name,
                    workers=workers,
                    text_mb=round(text_mb, 1),
                    docs=sum(n for n, _ in made.values()),
                    tokens=meta["train_tokens"] + meta["val_tokens"],
                    mb_per_s=round(text_mb / r["wall_s"], 2),
                    mb_per_cpu_s=round(text_mb / r["tree_cpu_s"], 2),
                    cores_used=round(r["tree_cpu_s"] / r["wall_s"], 2),
                    load_before=round(load, 2),
                )
                rows.append(r)
                print(jsonio.dumps(r), flush=True)
                shutil.rmtree(out)
    finally:
        if not args.keep:
            for path in (work / "tinystories", work / "owt.jsonl"):
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    print(
        f"\nhost: {platform.node()} {psutil.cpu_count()} CPUs, python {platform.python_version()}"
    )
    keys = ["corpus", "workers", "text_mb", "wall_s", "tree_cpu_s", "mb_per_s", "mb_per_cpu_s"]
    keys += ["cores_used", "tree_peak_pss_mb", "tree_peak_rss_mb", "time_max_rss_mb"]
    keys += ["other_load_cores"]
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
