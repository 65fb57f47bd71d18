#!/usr/bin/env bash
# Everything a GPU lease is for, in one command (one device call): the GPU
# checks with compute-sanitizer memcheck (gpu_check.sh), a per-kernel profile
# of the selector (Nsight Compute, when ncu is there), the full build and the
# end-to-end CUDA tests (gpu_full_check.sh), real training steps on the GPU
# (bench/train/gpu_train.sh), and every log in one archive.
#   scripts/gpu_session.sh            # on the GPU machine, from the repository root
# Writes to $OUT when set (the workplace's device tool returns it), else
# build-gpu/session: gpu_check.txt, gpu_full.txt, profile.txt, gpu_train.txt
# and .jsonl, logs.tgz.
# About 5 minutes on an H100 (2026-11-26: gpu_check 100 s, profile 20 s,
# full build and tests 95 s) before the training sitting and the memcheck of
# the selector's new launch shapes were added (2026-11-27, not run yet: a
# guess of 2-3 more minutes). Run it with the device's 600 s limit.
set -u
cd "$(dirname "$0")/.."
DEST=${OUT:-build-gpu/session}
LOGS=$(mktemp -d)
mkdir -p "$DEST" "$LOGS/check" "$LOGS/full"
export PYTHONUNBUFFERED=1

# Each script's own settings are given to it alone (mgs refuses unknown MGS_*
# variables in the ranks that gpu_full_check.sh starts).
MGS_GPU_OUT="$LOGS/check" MGS_GPU_SANITIZE=1 timeout 300 scripts/gpu_check.sh > "$DEST/gpu_check.txt" 2>&1
check=$?

bench=build-gpu/bench/compress/mgs-bench-compress-gpu
if command -v ncu > /dev/null && [ -x "$bench" ]; then
  timeout 90 ncu --csv --metrics gpu__time_duration.sum "$bench" --n 25600000 --density 0.001 0.01 \
    --selector gaussiank --reps 1 > "$LOGS/check/ncu.csv" 2> "$LOGS/check/ncu.err"
  # Per kernel, for the last select call of each density (µs).
  python3 - "$LOGS/check/ncu.csv" > "$DEST/profile.txt" 2>&1 <<'PYEOF'
import csv, re, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr, calls, cur = None, [], []
for r in rows:
    if r and r[0] == "ID":
        hdr = r
        continue
    if not hdr or len(r) != len(hdr):
        continue
    d = dict(zip(hdr, r))
    m = re.search(r"(\w+Kernel)", d["Kernel Name"])
    name = m.group(1) if m else d["Kernel Name"][:40]
    if name == "initKernel" and cur:
        calls.append(cur)
        cur = []
    cur.append((name, d.get("Grid Size", ""), float(d["Metric Value"].replace(",", "")) / 1000))
calls.append(cur)
for c in calls[1::2]:  # the timed repetition after each warm-up
    print(f"select call: {sum(us for _, _, us in c):.1f} us")
    for name, grid, us in c:
        print(f"  {name:16s} {grid:>14s} {us:8.1f} us")
PYEOF
fi

MGS_GPU_OUT="$LOGS/full" timeout 400 scripts/gpu_full_check.sh > "$DEST/gpu_full.txt" 2>&1
full=$?

# Real training steps on the GPU, every system in one sitting (needs the full
# build above): what compute, DDP, mgs dense and mgs sparse cost per step.
if [ -n "$(find build-gpu-full -name libmgs.so 2>/dev/null | head -1)" ]; then
  timeout 240 bench/train/gpu_train.sh -b build-gpu-full -o "$DEST/gpu_train.jsonl" > "$DEST/gpu_train.txt" 2>&1
  echo "gpu_train exit $?" >> "$DEST/gpu_train.txt"
fi
tar czf "$DEST/logs.tgz" -C "$LOGS" . 2>/dev/null
grep -E "summary|passed|FAILED|TIMED OUT|memcheck" "$DEST/gpu_check.txt"
grep -E "Test +#|summary|python.np2 with|crash_report|^ +-> " "$DEST/gpu_full.txt" | head -120
[ -f "$DEST/profile.txt" ] && head -20 "$DEST/profile.txt"
[ -f "$DEST/gpu_train.txt" ] && grep -E "^\||^[a-z].*rank|exit|failed" "$DEST/gpu_train.txt"
echo "gpu_session: gpu_check exit $check, gpu_full_check exit $full"
[ $check = 0 ] && [ $full = 0 ]
