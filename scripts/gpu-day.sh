#!/usr/bin/env bash
# The accelerator day (issue 34; docs/gpu-day.md): check the CUDA path, then train the next default
# model, each phase under a hard time budget, every result under $OUT (lab/gpu_day.py).
#
#   bash scripts/gpu-day.sh              on the lent GPU, as `run` calls it (--print-run shows the call)
#   bash scripts/gpu-day.sh --dry-run    the same steps on the CPU, tiny shape and pack (CI runs it)
#   bash scripts/gpu-day.sh --print-run  the device `run` call: command, carry, timeout_s
#
# Options: --out DIR (default $OUT; on the dry run runs/gpu-day-dry/out), --work DIR (scratch;
# default /tmp/gpu-day-work, on the dry run runs/gpu-day-dry/work), --phase check|train|all,
# --shape NAME (train another lab.shapes candidate than DAY_SHAPE), --train-s S (the train phase's
# budget instead of what the day leaves: a short second run in the device time left).
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0 PHASE=all OUTDIR=${OUT:-} WORK="" PY=${PYTHON:-python3} SHAPE="" TRAIN_FIXED=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --print-run) PYTHONPATH="$PWD" exec "$PY" -m lab.gpu_day print-run ;;
    --out) OUTDIR=$2; shift ;;
    --work) WORK=$2; shift ;;
    --phase) PHASE=$2; shift ;;
    --shape) SHAPE=$2; shift ;;
    --train-s) TRAIN_FIXED=$2; shift ;;
    *) echo "gpu-day.sh: unknown option $1 (--dry-run, --print-run, --out DIR, --work DIR, --phase check|train|all, --shape NAME, --train-s S)" >&2; exit 2 ;;
  esac
  shift
done
# (TOKENIZERS_PARALLELISM stays unset: the tokenizer trains on every core, and the data workers forked
# after it turn their own parallelism off, as the tokenizers library does after a fork)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# budgets (s): the check phase's; the train phase gets what is left of the day's DAY_S, at most
# TRAIN_MAX_S; each phase also runs under a hard `timeout` 10 s past its budget
if [ $DRY = 1 ]; then
  OUTDIR=${OUTDIR:-runs/gpu-day-dry/out}; WORK=${WORK:-runs/gpu-day-dry/work}
  FLAG=--dry-run
  export FSM_COMPLETE_CACHE=${FSM_COMPLETE_CACHE:-$WORK/fsm-cache}
else
  [ -n "$OUTDIR" ] || { echo "gpu-day.sh: no \$OUT: run it through the device tool, or pass --out DIR (--dry-run on a CPU)" >&2; exit 2; }
  WORK=${WORK:-/tmp/gpu-day-work}
  FLAG=
  export FSM_COMPLETE_CACHE=$WORK/fsm-cache
fi
eval "$("$PY" -m lab.gpu_day budgets $FLAG)"   # CHECK_S DAY_S TRAIN_MAX_S: lab/gpu_day.py BUDGET_S
rm -rf "$WORK"; mkdir -p "$OUTDIR" "$WORK"
T0=$(date +%s)
echo "gpu-day: out $OUTDIR, work $WORK, phase $PHASE${FLAG:+, $FLAG}"
RC_CHECK=-1 RC_TRAIN=-1 PACK=.corpus-pack
if [ $PHASE != train ]; then
  timeout --kill-after=5 $(( CHECK_S + 10 )) "$PY" -m lab.gpu_day check --out "$OUTDIR" --work "$WORK" --budget $CHECK_S $FLAG
  RC_CHECK=$?
  echo "gpu-day: check ended with status $RC_CHECK at $(( $(date +%s) - T0 )) s"
fi
if [ $PHASE != check ]; then
  if [ $DRY = 1 ]; then   # the dry run packs a tiny corpus the way the day's pack is built
    PACK=$WORK/pack
    "$PY" -m lab.gpu_day pack-tiny "$PACK" || echo "gpu-day: the tiny pack failed (see $WORK/pack-tiny.log)"
  fi
  TRAIN_S=$(( DAY_S - ($(date +%s) - T0) ))
  [ $TRAIN_S -le $TRAIN_MAX_S ] || TRAIN_S=$TRAIN_MAX_S
  [ -z "$TRAIN_FIXED" ] || TRAIN_S=$TRAIN_FIXED
  echo "gpu-day: train budget $TRAIN_S s${SHAPE:+, shape $SHAPE}"
  timeout --kill-after=5 $(( TRAIN_S + 10 )) "$PY" -m lab.gpu_day train --out "$OUTDIR" --work "$WORK" --pack "$PACK" \
    --budget $TRAIN_S ${SHAPE:+--shape $SHAPE} $FLAG
  RC_TRAIN=$?
  echo "gpu-day: train ended with status $RC_TRAIN at $(( $(date +%s) - T0 )) s"
fi
"$PY" -m lab.gpu_day finish --out "$OUTDIR" --work "$WORK" --rc check=$RC_CHECK --rc train=$RC_TRAIN
RC=$?
echo "gpu-day: done in $(( $(date +%s) - T0 )) s"
exit $RC
