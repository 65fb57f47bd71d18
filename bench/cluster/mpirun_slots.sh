#!/usr/bin/env bash
# Runs under `scripts/emulated_cluster.sh -k` (which sets EMULATED_HOSTS and
# EMULATED_AGENT): mpirun with R ranks on every emulated host instead of one,
# for the hierarchical exchange. Ranks r with the same r / R share a host
# (by-slot mapping), which is what MGS_NODE_SIZE=R groups; all namespaces
# share one host name, so the by-host-name grouping would see one node.
# Only TCP (no shared-memory btl: it would cross emulated hosts, which share
# the machine): a host's two ranks talk over its own address, unshaped, and
# everything between hosts crosses the shaped, delayed links.
#
# usage: bench/cluster/mpirun_slots.sh R "EXTRA MPIRUN ARGS" COMMAND [ARGS...]
set -euo pipefail
[ -n "${EMULATED_HOSTS:-}" ] && [ -n "${EMULATED_AGENT:-}" ] ||
  { echo "mpirun_slots: run me under scripts/emulated_cluster.sh -k" >&2; exit 2; }
per=$1
extra=$2
shift 2
hosts=$(echo "$EMULATED_HOSTS" | tr ',' '\n' | wc -l)
list=$(echo "$EMULATED_HOSTS" | sed "s/:1\(,\|$\)/:$per\1/g")
subnet=$(echo "$EMULATED_HOSTS" | cut -d, -f1 | cut -d: -f1 | cut -d. -f1-3)
# shellcheck disable=SC2086
exec mpirun --mca plm_rsh_agent "$EMULATED_AGENT" \
  --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
  --mca mpi_yield_when_idle 1 --mca pml ob1 -H "$list" -np $((hosts * per)) --map-by slot \
  -x PATH ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} -x MGS_NODE_SIZE="$per" $extra "$@"
