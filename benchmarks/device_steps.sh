# The steps of a check on a lent device, each under its own time limit: sourced (not run) by
# benchmarks/gpu_check.sh and benchmarks/gpu_train_check.sh, which say what their steps are.
#
# device_setup (after the check has read its arguments, OUT among them): PY (PYTHON, default
# python3), SMOKE, FAIL (GPU_CHECK_FAIL: steps that fail on purpose), OUT made absolute, TMP (a
# scratch directory), WORK ($TMP/results, packed as results/ into OUT/results.tar.gz after every
# step, with its logs/), and this repository's src/ and $TMP/site (offline wheels) on PYTHONPATH.
# steps_start (after the check has set LIMIT, step -> seconds, and BANKED, " a b ": the steps that
# run to their deadline): the schedule. The check defines summary_head (summary.md's title and
# settings lines), summary_body (what follows the total) and summary_foot (the last lines); either
# of the last two may print nothing.
#
# step NAME CSV COMMAND...: COMMAND under the step's limit (timeout, SIGKILL GRACE s later), its
# output in logs/NAME.log; a failure is recorded and the next step runs. Step i's deadline is the
# sum of (limit + GRACE) up to it; a BANKED step runs until its deadline less the grace, so it gets
# what the earlier steps left unused. CSV: the file whose data rows the summary counts (- none).
# skip NAME WHY: the step does not run; its limit and grace go to the banked steps.
# env_and_wheels: the first steps of a check (the device's record; with WHEELS, the offline
# install into $TMP/site); pack_and_finish: the last (results.tar.gz, the scratch directory
# removed), its status the check's exit status (1 if any step failed).

device_setup() {
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
}

steps_start() {
  GRACE=3
  BUDGET=0 # the last step's deadline: every limit and grace
  local name
  for name in "${!LIMIT[@]}"; do BUDGET=$((BUDGET + LIMIT[$name] + GRACE)); done
  SCHEDULE=0 # the deadline of the step now running, in seconds from START
  START=$SECONDS
  STEPS=() FAILED=()
}

rows() { # data rows of a CSV, or - if there is none
  if [ -s "$1" ]; then echo $(($(wc -l <"$1") - 1)); else echo -; fi
}

write_summary() {
  {
    summary_head
    if [ -s "$WORK/env.json" ]; then
      grep -E '"(device|device_name|torch|cuda|python)":' "$WORK/env.json" | head -5 | tr -s ' ' |
        sed 's/^/    /'
    fi
    echo
    echo "| step | status | exit | seconds | limit (s) | CSV rows |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${STEPS[@]}"
    echo
    echo "Total: $((SECONDS - START)) s (deadline $BUDGET s: the limits and a ${GRACE} s kill grace" \
      "each; the time the earlier steps left unused goes to:${BANKED% })."
    summary_body
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
    summary_foot
  } >"$OUT/summary.md.tmp" && mv "$OUT/summary.md.tmp" "$OUT/summary.md"
}

step() {
  local name=$1 csv=$2 rc status t0=$SECONDS limit=${LIMIT[$1]}
  shift 2
  local log=$WORK/logs/$name.log
  SCHEDULE=$((SCHEDULE + limit + GRACE))
  if [[ $BANKED == *" $name "* ]]; then # up to its deadline: its limit and what is left unused
    limit=$((SCHEDULE - GRACE - (SECONDS - START)))
    [ "$limit" -ge 1 ] || limit=1
  fi
  echo "== $name (limit ${limit} s) =="
  if [[ ",$FAIL," == *",$name,"* ]]; then
    echo "GPU_CHECK_FAIL=$FAIL: $name fails on purpose" >"$log"
    rc=97
  else
    timeout -k "$GRACE" "$limit" "$@" >"$log" 2>&1
    rc=$?
  fi
  case $rc in
    0) status=ok ;;
    97) status="failed on purpose (GPU_CHECK_FAIL)" ;;
    124 | 137) status="ran out of time" ;;
    *) status=failed ;;
  esac
  [ "$rc" = 0 ] || FAILED+=("$name")
  after_step
  tail -n 15 "$log"
  echo "-- $name: $status (exit $rc, $((SECONDS - t0)) s)"
  STEPS+=("| $name | $status | $rc | $((SECONDS - t0)) | $limit | $(rows "$csv") |")
  write_summary
  # what the steps so far left, packed now: a command cut off later still brings these back
  [ "$name" = pack ] || { tar -czf "$OUT/results.tar.gz.tmp" -C "$TMP" results &&
    mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"; } 2>/dev/null
}

skip() {
  SCHEDULE=$((SCHEDULE + LIMIT[$1] + GRACE))
  STEPS+=("| $1 | skipped: $2 | - | 0 | ${LIMIT[$1]} | - |")
  write_summary
}

after_step() { :; } # a check redefines it to keep what a step left (gpu_train_check.sh)

env_and_wheels() {
  step env - "$PY" -m tapernorm.cli env "${DEV[@]}" --out "$WORK/env.json"
  if [ -n "$WHEELS" ]; then
    step wheels - "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$SITE" "$WHEELS"/*.whl
  else
    skip wheels "no --wheels"
  fi
}

pack_and_finish() {
  [ -s "$WORK/env.json" ] && cp "$WORK/env.json" "$OUT/env.json"
  cp "$OUT/summary.md" "$WORK/summary.md"
  step pack - tar -czf "$OUT/results.tar.gz" -C "$TMP" results
  rm -rf "$TMP"
  echo "wrote $(ls "$OUT" | tr '\n' ' ')to $OUT"
  [ ${#FAILED[@]} = 0 ]
}
