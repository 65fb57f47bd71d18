#!/usr/bin/env bash
# An emulated cluster on one machine: N network namespaces ("hosts"), each
# joined to a bridge by a veth pair whose two ends are rate-limited with tc
# tbf (so every host has a full-duplex link of RATE), and a command run as
# one mpirun rank per host (Open MPI 4.1, design.md section 8):
#   --mca plm_rsh_agent <agent that runs 'ip netns exec nsN'>
#   --mca btl tcp,self --mca btl_tcp_if_include SUBNET --mca oob_tcp_if_include SUBNET
#   -H ADDR1:1,ADDR2:1,...
# Everything it creates is removed on exit (trap), also after errors or ^C.
# The "hosts" share this machine's cores, but Open MPI sees one slot per host
# and would busy-poll without yielding; mpi_yield_when_idle 1 is therefore
# always set (without it a rank spinning in a collective starves the rank it
# waits for: small collectives took ~25 ms instead of ~1 ms here).
#
# usage: scripts/emulated_cluster.sh [-n HOSTS] [-r 1gbit|10gbit|RATE] [-l LATENCY] [-s 10.77.0]
#                                    [-m "extra mpirun args"] [-t SECONDS] [-k] -- COMMAND [ARGS...]
#   -n  hosts (ranks), default 4
#   -r  per-link rate for tc tbf, default 1gbit ("none": no limit)
#   -l  added one-way delay per link and direction, e.g. 0.5ms or 500us (default
#       0: none). A frame host A -> host B crosses A's link and B's link, so it
#       gains 2x LATENCY, and a ping round trip 4x. With tc netem where the
#       kernel has it; else (this project's kernels: no sch_netem) each link is
#       cut in two and bench/cluster/delayline.c (built here with cc) holds
#       every frame for LATENCY in user space.
#   -s  first three octets of the /24 used (hosts .1..N, the bridge .254)
#   -m  extra mpirun arguments (e.g. "-x MGS_LOG_LEVEL=info")
#   -t  stop the job after SECONDS (exit status 124) and remove the cluster;
#       default 0: no limit. With EMULATED_STACKS_DIR set, every process of
#       the job (orted, shells and the delay lines aside) has its threads' stacks
#       written there first (gdb, DIR/host<i>_<pid>.txt): where it hung.
#   -k  run COMMAND directly (not under mpirun) in the root namespace while the
#       cluster is up, with EMULATED_HOSTS/EMULATED_AGENT/EMULATED_TAG set
#       (to inspect it: ip netns, tc -s qdisc; or to run mpirun yourself)
# Needs root (ip netns add), iproute2, tc, Open MPI. COMMAND must be reachable
# by the same path in every namespace (it is: namespaces share the filesystem).
# The rate limit and the latency are checked by scripts/emulated_linktest.sh.
set -euo pipefail

hosts=4
rate=1gbit
latency=0
subnet=10.77.0
extra=""
direct=0
timeout_s=0
while getopts "n:r:l:s:m:t:kh" opt; do
  case $opt in
    n) hosts=$OPTARG ;;
    r) rate=$OPTARG ;;
    l) latency=$OPTARG ;;
    s) subnet=$OPTARG ;;
    m) extra=$OPTARG ;;
    k) direct=1 ;;
    t) timeout_s=$OPTARG ;;
    h) sed -n '2,34p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "emulated_cluster: no command (see -h)" >&2; exit 2; }
[ "$hosts" -ge 1 ] && [ "$hosts" -le 200 ] || { echo "emulated_cluster: -n 1..200" >&2; exit 2; }
case $timeout_s in *[!0-9]*|"") echo "emulated_cluster: -t wants whole seconds, not '$timeout_s'" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "emulated_cluster: needs root (ip netns)" >&2; exit 2; }
# LATENCY in microseconds (an integer or a decimal), from "0.5ms", "500us" or "0".
case $latency in
  0) lat_us=0 ;;
  *ms) lat_us=$(awk -v v="${latency%ms}" 'BEGIN { printf "%.1f", v * 1000 }') ;;
  *us) lat_us=$(awk -v v="${latency%us}" 'BEGIN { printf "%.1f", v }') ;;
  *) echo "emulated_cluster: -l wants e.g. 0.5ms or 500us, not '$latency'" >&2; exit 2 ;;
esac
awk -v v="$lat_us" 'BEGIN { exit !(v >= 0 && v <= 1000000) }' || { echo "emulated_cluster: -l out of range" >&2; exit 2; }
[ "$lat_us" = 0.0 ] && lat_us=0

tag=mgs$$                     # unique per invocation: two clusters never collide
bridge=${tag}br
workdir=$(mktemp -d /tmp/emulated_cluster.XXXXXX)

relays=()                     # pids of the delay lines this script started
neigh_saved="" neigh_set=""   # the neighbour table limits before and while we run
mpirun_pid="" watchdog=""     # the job and its timer (-t)
cleanup() {
  local rc=$?
  set +e
  if [ -n "$mpirun_pid" ]; then
    kill -TERM "$mpirun_pid" 2>/dev/null
    sleep 1
    kill -KILL "$mpirun_pid" 2>/dev/null
  fi
  [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
  for pid in "${relays[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${relays[@]}"; do wait "$pid" 2>/dev/null; done
  for i in $(seq 1 "$hosts"); do
    ns=${tag}ns$i
    if ip netns list 2>/dev/null | grep -qw "$ns"; then
      # Processes still inside (orted, ranks) that this script started.
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null; done
      sleep 0.2
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
      ip netns del "$ns" 2>/dev/null
    fi
    ip link del "${tag}h$i" 2>/dev/null   # gone with the namespace normally
    ip link del "${tag}e$i" 2>/dev/null   # the delay line's side (-l)
  done
  ip link del "$bridge" 2>/dev/null
  # The neighbour table's limits, back to what they were (unless another
  # cluster has changed them since).
  if [ -n "$neigh_saved" ] && [ "$(sysctl -n net.ipv4.neigh.default.gc_thresh3)" = "$neigh_set" ]; then
    sysctl -qw net.ipv4.neigh.default.gc_thresh2="${neigh_saved% *}" net.ipv4.neigh.default.gc_thresh3="${neigh_saved#* }"
  fi
  # The delay lines' counters, when one dropped frames (its queue was full).
  grep -v " 0+0 dropped" "$workdir/delayline.log" 2>/dev/null | grep dropped >&2
  rm -rf "$workdir"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# tbf: burst of ~2 ms at the rate (at least 64 KiB, and above one 64 KiB GSO
# packet), queue of 20 ms before drops.
burst_bytes() {
  local bits
  case $rate in
    *gbit) bits=$(( ${rate%gbit} * 1000000000 )) ;;
    *mbit) bits=$(( ${rate%mbit} * 1000000 )) ;;
    *) echo "emulated_cluster: rate must be Ngbit or Nmbit or none" >&2; return 2 ;;
  esac
  local burst=$(( bits / 8 / 500 ))
  [ $burst -lt 131072 ] && burst=131072
  echo $burst
}
shape() {  # dev [netns]
  [ "$rate" = none ] && return 0
  local burst
  burst=$(burst_bytes)
  if [ -n "${2:-}" ]; then
    ip netns exec "$2" tc qdisc add dev "$1" root tbf rate "$rate" burst "$burst" latency 20ms
  else
    tc qdisc add dev "$1" root tbf rate "$rate" burst "$burst" latency 20ms
  fi
}

# Latency: tc netem if this kernel has it (probed in a scratch namespace),
# else the user-space delay line.
delay_mode=none
if [ "$lat_us" != 0 ]; then
  probe=${tag}probe
  ip netns add "$probe"
  if ip netns exec "$probe" tc qdisc add dev lo root netem delay "${lat_us}us" 2>/dev/null; then
    delay_mode=netem
  else
    delay_mode=relay
  fi
  ip netns del "$probe"
  if [ $delay_mode = relay ]; then
    src=$(cd "$(dirname "$0")/.." && pwd)/bench/cluster/delayline.c
    cc -O2 -o "$workdir/delayline" "$src" || { echo "emulated_cluster: cannot build $src" >&2; exit 2; }
  fi
fi
# netem as the root qdisc, tbf as its child (netem delays, then tbf paces);
# without latency tbf alone is the root, as before.
shape_latency() {  # dev [netns]
  local ns=()
  [ -n "${2:-}" ] && ns=(ip netns exec "$2")
  if [ $delay_mode = netem ]; then
    "${ns[@]}" tc qdisc add dev "$1" root handle 1: netem delay "${lat_us}us" limit 100000
    [ "$rate" = none ] || "${ns[@]}" tc qdisc add dev "$1" parent 1:1 handle 10: tbf rate "$rate" burst "$(burst_bytes)" latency 20ms
  else
    shape "$@"
  fi
}

# The kernel keeps one ARP table for all namespaces (gc_thresh3 entries in all,
# 1024 by default). Every host learns every other host's address, so HOSTS^2
# entries: at 32 hosts the table overflows, connect() fails with EAGAIN
# ("Resource temporarily unavailable") and MPI hangs in its first collective.
# Raise the limits while the cluster is up; cleanup restores them.
need=$(( 4 * (hosts + 1) * (hosts + 1) + 1024 ))
cur3=$(sysctl -n net.ipv4.neigh.default.gc_thresh3 2>/dev/null || echo 0)
if [ "$cur3" -gt 0 ] && [ "$cur3" -lt "$need" ]; then
  neigh_saved="$(sysctl -n net.ipv4.neigh.default.gc_thresh2) $cur3"
  neigh_set=$need
  sysctl -qw net.ipv4.neigh.default.gc_thresh2="$need" net.ipv4.neigh.default.gc_thresh3="$need" ||
    echo "emulated_cluster: warning: cannot raise the ARP table limit to $need entries; $hosts hosts may not connect" >&2
fi

if ip -o -4 addr show | grep -q " $subnet\."; then
  echo "emulated_cluster: $subnet.0/24 is already in use here (another cluster?); pick another with -s" >&2
  exit 2
fi
ip link add name "$bridge" type bridge
ip addr add "$subnet.254/24" dev "$bridge"
ip link set "$bridge" up
hostlist=""
for i in $(seq 1 "$hosts"); do
  ns=${tag}ns$i
  ip netns add "$ns"
  if [ $delay_mode = relay ]; then
    # eth0 <-> d [delay line] e <-> h (bridge port)
    ip link add "${tag}d$i" type veth peer name "${tag}c$i"
    ip link add "${tag}e$i" type veth peer name "${tag}h$i"
    for side in d e; do
      sysctl -qw "net.ipv6.conf.${tag}$side$i.disable_ipv6=1" 2>/dev/null || true
      ip link set "${tag}$side$i" up
    done
    "$workdir/delayline" "${tag}d$i" "${tag}e$i" "$lat_us" 2>>"$workdir/delayline.log" &
    relays+=($!)
  else
    ip link add "${tag}h$i" type veth peer name "${tag}c$i"
  fi
  ip link set "${tag}c$i" netns "$ns"
  ip -n "$ns" link set "${tag}c$i" name eth0
  ip -n "$ns" addr add "$subnet.$i/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip link set "${tag}h$i" master "$bridge"
  ip link set "${tag}h$i" up
  shape_latency "${tag}h$i"          # bridge -> host i (download)
  shape_latency eth0 "$ns"           # host i -> bridge (upload)
  hostlist+="${hostlist:+,}$subnet.$i:1"
  echo "$subnet.$i $ns" >> "$workdir/hosts"
done

# plm_rsh_agent: Open MPI calls it as '<agent> [options] <host> <orted command...>'.
cat > "$workdir/agent" <<EOF
#!/usr/bin/env bash
while [ "\${1:0:1}" = "-" ]; do shift; done
host=\$1; shift
ns=\$(awk -v h="\$host" '\$1 == h { print \$2 }' "$workdir/hosts")
[ -n "\$ns" ] || { echo "emulated_cluster agent: unknown host \$host" >&2; exit 255; }
# All namespaces share /tmp and the hostname: a session directory per host,
# or concurrent daemons race on mkdir /tmp/ompi.<host>.<uid>/jf.<job>.
mkdir -p "$workdir/tmp/\$ns"
export OMPI_MCA_orte_tmpdir_base="$workdir/tmp/\$ns"
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$workdir/agent"

echo "emulated_cluster: $hosts hosts ($hostlist), links $rate, added latency ${lat_us} us per link and direction ($delay_mode) via bridge $bridge ($subnet.254)" >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$direct" = 1 ]; then
  EMULATED_HOSTS=$hostlist EMULATED_AGENT=$workdir/agent EMULATED_TAG=$tag EMULATED_DELAY=$delay_mode "$@"
else
  # mpirun in the background and waited for: a signal to this script (^C,
  # a caller's timeout) then reaches the trap at once, which stops mpirun
  # and removes the cluster, instead of waiting for a job that may hang.
  # Beyond 16 hosts every pair connects at MPI_Init (mpi_preconnect_mpi),
  # in turn: left to the first message, the connections of 32 ranks on two
  # cores raced each other and one rank waited for ever in its first
  # broadcast. Up to 16 hosts connections stay lazy, as they always were.
  [ "$hosts" -gt 16 ] && extra="--mca mpi_preconnect_mpi 1 $extra"
  # shellcheck disable=SC2086
  mpirun --mca plm_rsh_agent "$workdir/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
    --mca mpi_yield_when_idle 1 --mca pml ob1 -H "$hostlist" -np "$hosts" -x PATH ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} $extra "$@" &
  mpirun_pid=$!
  if [ "$timeout_s" != 0 ]; then
    ( sleep "$timeout_s"
      touch "$workdir/timed_out"
      echo "emulated_cluster: the job ran past $timeout_s s (-t): stopping it" >&2
      if [ -n "${EMULATED_STACKS_DIR:-}" ] && command -v gdb >/dev/null; then
        mkdir -p "$EMULATED_STACKS_DIR"
        for i in $(seq 1 "$hosts"); do
          for pid in $(ip netns pids "${tag}ns$i" 2>/dev/null); do
            case $(cat "/proc/$pid/comm" 2>/dev/null) in orted|prted|delayline|bash|sh|"") continue ;; esac
            timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt" \
              > "$EMULATED_STACKS_DIR/host${i}_$pid.txt" 2>&1
          done
        done
        echo "emulated_cluster: the job's stacks are in $EMULATED_STACKS_DIR" >&2
      fi
      kill -TERM "$mpirun_pid" 2>/dev/null; sleep 5; kill -KILL "$mpirun_pid" 2>/dev/null ) &
    watchdog=$!
  fi
  set +e
  wait "$mpirun_pid"
  rc=$?
  set -e
  mpirun_pid=""
  [ -f "$workdir/timed_out" ] && rc=124
  exit $rc
fi
