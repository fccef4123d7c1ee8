"""The benchmarks behind `tapernorm bench` and benchmarks/*.py, one module per concept. Importers
name the module (`from tapernorm.bench.decode import bench_decode`); nothing is re-exported here.

  timing       the timing kit: Clock, paired_rounds, timed, CsvRows, environment, dtypes, matmul
               precision
  trust        what a cell's rounds say and whether to believe them: paired speedups, the load of
               other processes, disturbed cells, RERUN (imports no torch: the analysis uses it)
  variants     the models timed: the paper's config, random-weight variants, Table 3's columns
               {baseline, explicit, folded} (and dyt), verified copies on the benchmark's device
  train_step   seconds per training step, ours against transformers' Llama (`bench train-step`)
  forward      paper Table 3: the forward pass, no KV cache (`bench forward`)
  decode       greedy decode with a KV cache, eager and compiled (`bench decode`); the decoders
               themselves are tapernorm.decode's
  step_linear  the eager decode step's linear kernels against one kernel per layer (a micro-benchmark)
  generate     GPT.generate against transformers' generate and the memory floor
  settings     the config's `bench:` section as BenchSettings (ForwardGrid, DecodeGrid) and BenchRuns
  grid         what `bench forward|decode` times: random or trained models, the grid, the summary

The `tapernorm bench` subcommands, each with only its own options, are tapernorm.cli.bench's.
"""
