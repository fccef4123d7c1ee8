#!/usr/bin/env bash
# Inference benchmarks at the paper's scale on one CUDA GPU: the 30M model (d=512, L=8, 16 heads,
# vocab 10k; random weights, an Internal-Taper model at g=0 exported as explicit scaling and folded)
# in bf16. Forward = paper Table 3's grid; decode = our v2 grid, eager, then compiled (torch.compile
# mode reduce-overhead, i.e. CUDA graphs). Installs nothing: needs this repo installed
# (pip install -e .) with a CUDA build of torch.
#
#   bash benchmarks/gpu_bench.sh [OUT_DIR]        # default results/gpu/
#   SMOKE=1 bash benchmarks/gpu_bench.sh OUT_DIR  # the same steps on the CPU, tiny model and grids:
#                                                 # checks the script without a GPU (tests run it)
#
# Writes OUT_DIR/{env.json, forward.csv, decode_eager.csv, decode_compiled_b*.csv, decode.csv,
# table3.*, table_decode.*, fig5_decode_speedup.*} and a log per step. Each step has a time limit, so
# the script ends within about 10 minutes; a step that runs out of time leaves the earlier ones.
set -euo pipefail

OUT="${1:-results/gpu}"
PY="${PYTHON:-python}"
mkdir -p "$OUT"
tn() { "$PY" -m tapernorm.cli "$@"; }

SMOKE="${SMOKE:-0}"
if [ "$SMOKE" = 1 ]; then
  MODEL=(--random d64 --device cpu --dtype float32)
  FORWARD=(--batch-sizes 1 --seq-lens 16 --warmup 1 --repeats 2)
  DECODE=(--prompt-lens 8 --new-tokens 4 --warmup 1 --repeats 2)
  BATCHES=(1)
else
  MODEL=(--random d512 --device cuda --dtype bfloat16)
  FORWARD=(--batch-sizes 1 4 --seq-lens 128 256 512 --warmup 10 --repeats 50)
  DECODE=(--prompt-lens 128 512 --new-tokens 256 --warmup 2 --repeats 10)
  BATCHES=(1 4 16)
fi

"$PY" - "$OUT/env.json" "$SMOKE" <<'PYEOF'
import json, platform, subprocess, sys

import torch

smoke = sys.argv[2] == "1"
assert smoke or torch.cuda.is_available(), "gpu_bench.sh needs a CUDA GPU visible to torch"
query = "--query-gpu=name,driver_version,memory.total,clocks.max.sm"
try:
    smi = subprocess.run(["nvidia-smi", query, "--format=csv"], capture_output=True, text=True).stdout
except FileNotFoundError:
    smi = "nvidia-smi not found"
env = {
    "device": "cpu (SMOKE=1)" if smoke else torch.cuda.get_device_name(),
    "capability": None if smoke else torch.cuda.get_device_capability(),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "cudnn": torch.backends.cudnn.version(),
    "python": platform.python_version(),
    "nvidia_smi": smi,
}
json.dump(env, open(sys.argv[1], "w"), indent=2)
print(json.dumps(env, indent=2))
PYEOF

echo "== forward (Table 3 grid) =="
timeout 120 "$PY" -m tapernorm.cli bench forward "${MODEL[@]}" "${FORWARD[@]}" \
  --out "$OUT/forward.csv" 2>&1 | tee "$OUT/forward.log"

echo "== decode, eager =="
timeout 180 "$PY" -m tapernorm.cli bench decode "${MODEL[@]}" "${DECODE[@]}" --modes eager \
  --batch-sizes "${BATCHES[@]}" --out "$OUT/decode_eager.csv" 2>&1 | tee "$OUT/decode_eager.log"

echo "== decode, compiled (torch.compile reduce-overhead = CUDA graphs), one batch size at a time =="
# every (variant, cell) compiles its own graph: batch sizes run while time is left (~5 minutes)
status=0
deadline=$((SECONDS + 300))
for B in "${BATCHES[@]}"; do
  left=$((deadline - SECONDS))
  if [ "$left" -lt 30 ]; then
    echo "no time left for compiled B=$B"
    status=124
    break
  fi
  timeout "$left" "$PY" -m tapernorm.cli bench decode "${MODEL[@]}" "${DECODE[@]}" \
    --modes compiled --batch-sizes "$B" --out "$OUT/decode_compiled_b$B.csv" 2>&1 \
    | tee "$OUT/decode_compiled_b$B.log" \
    || { status=$?; echo "compiled decode B=$B failed or ran out of time (status $status)"; }
done

"$PY" - "$OUT" <<'PYEOF'
import sys
from pathlib import Path

import pandas as pd

out = Path(sys.argv[1])
parts = [out / "decode_eager.csv", *sorted(out.glob("decode_compiled_b*.csv"))]
pd.concat([pd.read_csv(p) for p in parts if p.exists()]).to_csv(out / "decode.csv", index=False)
PYEOF
tn table 3 --bench "$OUT/forward.csv" --out "$OUT/table3"
tn table decode --bench "$OUT/decode.csv" --out "$OUT/table_decode"
tn figure fig5 --bench "$OUT/decode.csv" --out "$OUT/fig5_decode_speedup.pdf"
cat "$OUT/table3.md" "$OUT/table_decode.md"
exit "$status"
