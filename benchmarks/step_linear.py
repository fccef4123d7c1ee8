"""The eager decode step's linear kernels (decode.step_linear) against MKL's GEMM, per model width.

    python benchmarks/step_linear.py --out DIR [--batch 1] [--repeats 15] [--threads 2]

The paper's llama model at widths 64-512 (head_dim 32, random weights, float32, this CPU), a 64-token
prompt, then 64 decode steps timed: every linear layer on its own kernel against step_linear's choice,
interleaved rounds. Writes DIR/step_linear_b{batch}.csv and .md. Nothing is asserted about speed.
See tapernorm/bench/step_linear.py (bench_step_linear).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from tapernorm.bench.step_linear import bench_step_linear
from tapernorm.runtime.output_set import OutputSet, marker_path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="directory for the CSV and markdown")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--batch", type=int, default=1, help="sequences decoded at once")
    p.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256, 384, 512])
    p.add_argument("--repeats", type=int, default=15, help="interleaved timed rounds")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = bench_step_linear(tuple(args.widths), batch=args.batch, repeats=args.repeats)
    name = f"step_linear_b{args.batch}"
    table = pd.DataFrame(rows)
    lines = [
        f"Eager decode step, batch {args.batch}, {args.threads} threads, {args.repeats} interleaved "
        "rounds: every linear layer on its own kernel vs decode.step_linear.",
        "",
        "| d | own kernel, ms a step | step_linear, ms a step | speedup (median [IQR]) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n_embd']} | {r['layer_ms']:.2f} | {r['step_linear_ms']:.2f} | "
            f"{r['speedup']:.2f} [{r['speedup_q1']:.2f}, {r['speedup_q3']:.2f}] |"
        )
    report = "\n".join(lines) + "\n"
    out = OutputSet(marker_path(args.out / name), "python benchmarks/step_linear.py")
    out.add(args.out / f"{name}.csv", table.to_csv(index=False).encode())
    out.add(args.out / f"{name}.md", report.encode())
    out.commit()  # the CSV and markdown as one set (tapernorm.runtime.output_set)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
