#!/bin/bash
# fixed-64MB, ResNet-50, 1 Gbit/s, rho 0.001, 16 emulated hosts: the build of 2026-12-06 (f2040e7) against this one
cd /work/main
O=bench/cluster/results/regress_check/fixed64_resnet50_1gbit_0.001_16.jsonl
for b in build /tmp/before/build /tmp/before/build build build /tmp/before/build; do
  env MGS_REPLAN_TOLERANCE=0.15 MGS_MIN_SPARSE_ELEMENTS=40 MGS_FUSION_THRESHOLD_BYTES=671088 MGS_FUSION_TRIALS=0 OMP_NUM_THREADS=1 \
    timeout 600 scripts/emulated_cluster.sh -n 16 -r 1gbit -l 0.5ms \
    -m "-x OMP_NUM_THREADS -x MGS_REPLAN_TOLERANCE -x MGS_MIN_SPARSE_ELEMENTS -x MGS_FUSION_THRESHOLD_BYTES -x MGS_FUSION_TRIALS" -- \
    $( [ ${b:0:1} = / ] && echo $b || echo $PWD/$b )/bench/mgs-replay --label "fixed64MB-$b" --wire-iface eth0 --strategy fusion --trace tools/traces/resnet50.json \
    --steps 40 --profile-steps 3 --scale-time 0.25 --density 0.001 --scale-elements 0.01 --sim-network 1gbe < /dev/null > /tmp/ab_run.log 2>&1
  echo "$b rc=$?"; grep "^{" /tmp/ab_run.log >> $O; grep "^{" /tmp/ab_run.log | grep -o '"median_s":[0-9.]*'
done
