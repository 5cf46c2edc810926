#!/usr/bin/env bash
# The one prepared device run (issue 27/brief): the `full` battery through the CLI on cuda for every
# built-in rule (one process per rule, in parallel), and benchmarks/gpu_check.py (throughput at
# 2^24 rows, syncs, same seed, big cells, mutants, wrapper, e2e) beside them. Everything lands in
# one archive, $OUT/gpu_session.tgz (the device tool brings back at most 8 files).
#   SUITE=smoke DEVICE=cpu OUT=/tmp/x bash benchmarks/gpu_session.sh    # dry run here
set -u
SUITE=${SUITE:-full}; DEVICE=${DEVICE:-cuda}; BUDGET=${BUDGET:-450}
RULES=${RULES:-"rmc dgrs rass rass-icdf mcrs mcrs2"}
RES=$(mktemp -d); export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 SPECCHECK_CACHE_DIR=$RES/cache OMP_NUM_THREADS=2
mkdir -p "$RES/check" "$OUT"
{ date -u; nvidia-smi -L 2>/dev/null; python3 -c "import torch,numpy,scipy;print(torch.__version__,numpy.__version__,scipy.__version__,torch.cuda.is_available())"; } > "$RES/env.txt" 2>&1
for r in $RULES; do
  ( t0=$SECONDS
    timeout "$BUDGET" python3 -c "import sys; from speccheck.cli import main; sys.exit(main(sys.argv[1:]))" \
      battery --verifier "$r" --suite "$SUITE" --device "$DEVICE" --no-progress --timeout "$BUDGET" \
      --json "$RES/battery_${SUITE}_$r.json" > "$RES/battery_${SUITE}_$r.log" 2>&1
    rc=$?; echo "$r rc=$rc wall_s=$((SECONDS - t0))" >> "$RES/battery_rc.txt" ) &
done
QUICK=""; [ "$DEVICE" = cpu ] && QUICK="--quick"
timeout "$BUDGET" python3 benchmarks/gpu_check.py $QUICK --device "$DEVICE" --out "$RES/check" > "$RES/check.log" 2>&1 &
wait
tar czf "$OUT/gpu_session.tgz" -C "$RES" --exclude cache .
cat "$RES/battery_rc.txt"; tail -15 "$RES/check.log"
for r in $RULES; do echo "== $r"; tail -4 "$RES/battery_${SUITE}_$r.log"; done
