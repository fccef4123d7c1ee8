"""GPT.generate (eager and compile=True) vs transformers' generate on this CPU, and the memory floor.

    python benchmarks/generate_speed.py --out DIR [--repeats 15] [--threads 2]

The paper's 30M llama model (d=512, L=8, 16 heads, vocab 10k) with random weights and its transformers
twin (the same weights), batch 1, a 64-token prompt, 64 new tokens, float32: the tokens must be equal
(exit status 1 otherwise), then the three generate calls are timed end to end, interleaved; the first
compile=True call (the compile) is untimed and reported apart. See tapernorm/bench/generate.py.
Writes DIR/generate_speed.csv and DIR/generate_speed.md. Nothing is asserted about speed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from tapernorm.bench.generate import GenerateMismatchError, bench_generate, markdown
from tapernorm.bench.variants import paper_config
from tapernorm.runtime.output_set import OutputSet, marker_path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="directory for the CSV and markdown")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=15, help="interleaved timed rounds")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds before them")
    p.add_argument("--no-compiled", action="store_true", help="skip GPT.generate(compile=True)")
    p.add_argument("--tiny", action="store_true", help="a d=32 model (a quick check of the wiring)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    tiny = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=97)
    try:
        rows = bench_generate(
            paper_config(**(tiny if args.tiny else {})),
            batch=args.batch,
            prompt_len=args.prompt_len,
            new_tokens=args.new_tokens,
            repeats=args.repeats,
            warmup=args.warmup,
            compile=not args.no_compiled,
        )
    except GenerateMismatchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    report = markdown(rows)
    out = OutputSet(marker_path(args.out / "generate_speed"), "python benchmarks/generate_speed.py")
    out.add(args.out / "generate_speed.csv", pd.DataFrame(rows).to_csv(index=False).encode())
    out.add(args.out / "generate_speed.md", report.encode())
    out.commit()  # the CSV and markdown as one set (tapernorm.runtime.output_set)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
