#!/usr/bin/env bash
# The first-GPU check: one command, within 8 minutes, on a CUDA machine that may have no network
# (nothing is installed; python3 with torch >= 2.11 and pandas; this repo's src/ on PYTHONPATH).
#
#   bash benchmarks/gpu_check.sh OUT_DIR [--wheels DIR]
#   SMOKE=1 bash benchmarks/gpu_check.sh OUT_DIR   # the same steps on the CPU, tiny model and grids
#   GPU_CHECK_FAIL=forward,selftest ...            # these steps fail on purpose (the tests' check)
#
# --wheels DIR: pip-install DIR/*.whl offline (--no-index --no-deps) into a temporary directory on
# PYTHONPATH first (how to prepare them: benchmarks/README.md). PYTHON (default python3) runs the steps.
#
# Steps, in order of value, each under its own time limit (timeout; SIGKILL 3 s after it). A step
# that fails or runs out of time is recorded and the next one runs; benchmark steps append their CSV
# rows cell by cell (flushed), so a step stopped at its limit keeps the cells it finished.
#
# | step                 | limit (s) | what                                                         |
# |----------------------|-----------|--------------------------------------------------------------|
# | env                  | 10        | env.json: device, versions, nvidia-smi, optional packages     |
# | wheels               | 20        | only with --wheels: the offline install                      |
# | selftest             | 70        | tapernorm selftest --device cuda --no-compile                |
# | train_step           | 45        | bench train-step, bf16 autocast, d=512/256/128/64, paper config|
# | forward              | 40        | Table 3's grid at d=512 in bf16 (B 1,4 x T 128,256,512)      |
# | decode_eager         | 90        | KV-cache decoding, eager, B 1,4,16 x prompt 128,512, 256 new  |
# | decode_compiled_p128 | 90        | compiled (CUDA graphs, verified), B 1,4,16, prompt 128       |
# | decode_compiled_p512 | 80        | compiled (CUDA graphs, verified), B 1,4,16, prompt 512       |
# | pack                 | 5         | results.tar.gz                                               |
# Limits: 450 s; with each step's 3 s kill grace at most 477 s in all.
#
# OUT_DIR ends with at most 4 files: summary.md (each step's status, exit code, time, rows; the end of
# a failed step's log), env.json, results.tar.gz (results/: the CSVs, env.json, logs/). Tables and
# figure 5 from them, on any machine: tapernorm gpu-report OUT_DIR (benchmarks/README.md).
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
PY=${PYTHON:-python3}
SMOKE=${SMOKE:-0}
FAIL=${GPU_CHECK_FAIL:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TMP=$(mktemp -d)
WORK=$TMP/results # packed as results/ in results.tar.gz
mkdir -p "$WORK/logs"
SITE=$TMP/site
export PYTHONPATH="$REPO/src:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
START=$SECONDS
STEPS=() FAILED=()

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

rows() { # data rows of a CSV, or - if there is none
  if [ -s "$1" ]; then echo $(($(wc -l <"$1") - 1)); else echo -; fi
}

write_summary() {
  {
    echo "# First-GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC'); SMOKE=$SMOKE; GPU_CHECK_FAIL=${FAIL:-none};" \
      "wheels: ${WHEELS:-none}; python: $PY"
    if [ -s "$WORK/env.json" ]; then
      grep -E '"(device|device_name|torch|cuda|python)":' "$WORK/env.json" | head -5 | tr -s ' ' |
        sed 's/^/    /'
    fi
    echo
    echo "| step | status | exit | seconds | limit (s) | CSV rows |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${STEPS[@]}"
    echo
    echo "Total: $((SECONDS - START)) s (limits 450 s; with kill graces at most 477 s)."
    for name in "${FAILED[@]}"; do
      echo
      echo "## $name failed: the end of its log"
      echo '```'
      tail -n 25 "$WORK/logs/$name.log"
      echo '```'
    done
    if [ -s "$OUT/results.tar.gz" ]; then
      echo
      echo "## results.tar.gz"
      echo '```'
      tar -tzf "$OUT/results.tar.gz" | sort
      echo '```'
    fi
    echo
    echo "Tables, figure 5 and the GPU-hours from these files: tapernorm gpu-report DIR"
  } >"$OUT/summary.md.tmp" && mv "$OUT/summary.md.tmp" "$OUT/summary.md"
}

# step NAME LIMIT CSV COMMAND...: run COMMAND under LIMIT seconds, its output in logs/NAME.log
step() {
  local name=$1 limit=$2 csv=$3 rc status t0=$SECONDS
  shift 3
  local log=$WORK/logs/$name.log
  echo "== $name (limit ${limit} s) =="
  if [[ ",$FAIL," == *",$name,"* ]]; then
    echo "GPU_CHECK_FAIL=$FAIL: $name fails on purpose" >"$log"
    rc=97
  else
    timeout -k 3 "$limit" "$@" >"$log" 2>&1
    rc=$?
  fi
  case $rc in
    0) status=ok ;;
    97) status="failed on purpose (GPU_CHECK_FAIL)" ;;
    124 | 137) status="ran out of time" ;;
    *) status=failed ;;
  esac
  [ "$rc" = 0 ] || FAILED+=("$name")
  tail -n 15 "$log"
  echo "-- $name: $status (exit $rc, $((SECONDS - t0)) s)"
  STEPS+=("| $name | $status | $rc | $((SECONDS - t0)) | $limit | $(rows "$csv") |")
  write_summary
  # what the steps so far left, packed now: a command cut off later still brings these back
  [ "$name" = pack ] || { tar -czf "$OUT/results.tar.gz.tmp" -C "$TMP" results &&
    mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"; } 2>/dev/null
}

skip() { # skip NAME LIMIT WHY
  STEPS+=("| $1 | skipped: $3 | - | 0 | $2 | - |")
  write_summary
}

TN=("$PY" -m tapernorm.cli)

step env 10 - "${TN[@]}" env "${DEV[@]}" --out "$WORK/env.json"
if [ -n "$WHEELS" ]; then
  step wheels 20 - "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$SITE" "$WHEELS"/*.whl
else
  skip wheels 20 "no --wheels"
fi
step selftest 70 - "${TN[@]}" selftest "${DEV[@]}" --no-compile  # compiled: decode steps
step train_step 45 "$WORK/train_step.csv" "${TN[@]}" bench train-step "${DEV[@]}" "${TRAIN[@]}" \
  --no-hf --with-dyt --out "$WORK/train_step.csv"
step forward 40 "$WORK/forward.csv" "${TN[@]}" bench forward "${DEV[@]}" "${MODEL[@]}" "${FORWARD[@]}" \
  --out "$WORK/forward.csv"
step decode_eager 90 "$WORK/decode_eager.csv" "${TN[@]}" bench decode "${DEV[@]}" "${MODEL[@]}" \
  --no-dyt "${DECODE[@]}" --modes eager --out "$WORK/decode_eager.csv"
compiled() { # compiled NAME LIMIT PROMPT
  step "$1" "$2" "$WORK/$1.csv" "${TN[@]}" bench decode "${DEV[@]}" "${MODEL[@]}" --no-dyt \
    "${COMPILED[@]}" --prompt-lens "$3" --modes compiled --out "$WORK/$1.csv"
}
compiled decode_compiled_p128 90 "$P_SHORT"
compiled decode_compiled_p512 80 "$P_LONG"

[ -s "$WORK/env.json" ] && cp "$WORK/env.json" "$OUT/env.json"
cp "$OUT/summary.md" "$WORK/summary.md"
step pack 5 - tar -czf "$OUT/results.tar.gz" -C "$TMP" results
rm -rf "$TMP"
echo "wrote $(ls "$OUT" | tr '\n' ' ')to $OUT"
[ ${#FAILED[@]} = 0 ] # the exit status: 1 if any step failed
