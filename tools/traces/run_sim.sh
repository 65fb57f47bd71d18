#!/bin/sh
# Regenerate the simulator results in docs/planner.md: tables, JSON and plots.
# usage: tools/traces/run_sim.sh BUILD_DIR   (run from the repository root)
set -eu
build=${1:-build}
out=tools/traces/results
mkdir -p "$out"
for net in 10gbe 1gbe; do
  # 10GbE with the papers' top-k time model; 1GbE with a linear (threshold) selector.
  if [ "$net" = 10gbe ]; then sel="--sparsify nlogn --sparsify-c 2.18896957e-10"
  else sel="--sparsify linear --sparsify-c 2e-11"; fi
  for model in resnet50 vgg16 bert_base; do
    # shellcheck disable=SC2086
    "$build/tools/mgs-sim" -t "tools/traces/$model.json" -n "$net" $sel \
      --metric efficiency --json "$out/${model}_$net.json" > "$out/${model}_$net.txt"
  done
  /usr/bin/python3 tools/plot_sim.py "$out/sim_$net.png" \
    "$out/resnet50_$net.json" "$out/vgg16_$net.json" "$out/bert_base_$net.json"
done
# Issue 14's goal: ResNet-50, 10GbE, selection on its own stage (the runtime's
# placement), both densities, with the agreed-index exchange's columns.
for rho in 0.01 0.001; do
  "$build/tools/mgs-sim" -t tools/traces/resnet50.json -n 10gbe --sparsify nlogn --sparsify-c 2.18896957e-10 \
    --selection separate -d "$rho" --metric time --json "$out/resnet50_10gbe_separate_rho$rho.json" \
    > "$out/resnet50_10gbe_separate_rho$rho.txt"
done
