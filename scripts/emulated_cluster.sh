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
# usage: scripts/emulated_cluster.sh [-n HOSTS] [-r 1gbit|10gbit|RATE] [-s 10.77.0]
#                                    [-m "extra mpirun args"] [-k] -- COMMAND [ARGS...]
#   -n  hosts (ranks), default 4
#   -r  per-link rate for tc tbf, default 1gbit ("none": no limit)
#   -s  first three octets of the /24 used (hosts .1..N, the bridge .254)
#   -m  extra mpirun arguments (e.g. "-x MGS_LOG_LEVEL=info")
#   -k  run COMMAND directly (not under mpirun) in the root namespace while the
#       cluster is up, with EMULATED_HOSTS/EMULATED_AGENT/EMULATED_TAG set
#       (to inspect it: ip netns, tc -s qdisc; or to run mpirun yourself)
# Needs root (ip netns add), iproute2, tc, Open MPI. COMMAND must be reachable
# by the same path in every namespace (it is: namespaces share the filesystem).
# The rate limit is checked by scripts/emulated_linktest.sh.
set -euo pipefail

hosts=4
rate=1gbit
subnet=10.77.0
extra=""
direct=0
while getopts "n:r:s:m:kh" opt; do
  case $opt in
    n) hosts=$OPTARG ;;
    r) rate=$OPTARG ;;
    s) subnet=$OPTARG ;;
    m) extra=$OPTARG ;;
    k) direct=1 ;;
    h) sed -n '2,21p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "emulated_cluster: no command (see -h)" >&2; exit 2; }
[ "$hosts" -ge 1 ] && [ "$hosts" -le 200 ] || { echo "emulated_cluster: -n 1..200" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "emulated_cluster: needs root (ip netns)" >&2; exit 2; }

tag=mgs$$                     # unique per invocation: two clusters never collide
bridge=${tag}br
workdir=$(mktemp -d /tmp/emulated_cluster.XXXXXX)

cleanup() {
  local rc=$?
  set +e
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
  done
  ip link del "$bridge" 2>/dev/null
  rm -rf "$workdir"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# tbf: burst of ~2 ms at the rate (at least 64 KiB, and above one 64 KiB GSO
# packet), queue of 20 ms before drops.
shape() {  # dev [netns]
  [ "$rate" = none ] && return 0
  local bits
  case $rate in
    *gbit) bits=$(( ${rate%gbit} * 1000000000 )) ;;
    *mbit) bits=$(( ${rate%mbit} * 1000000 )) ;;
    *) echo "emulated_cluster: rate must be Ngbit or Nmbit or none" >&2; return 2 ;;
  esac
  local burst=$(( bits / 8 / 500 ))
  [ $burst -lt 131072 ] && burst=131072
  if [ -n "${2:-}" ]; then
    ip netns exec "$2" tc qdisc add dev "$1" root tbf rate "$rate" burst "$burst" latency 20ms
  else
    tc qdisc add dev "$1" root tbf rate "$rate" burst "$burst" latency 20ms
  fi
}

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
  ip link add "${tag}h$i" type veth peer name "${tag}c$i"
  ip link set "${tag}c$i" netns "$ns"
  ip -n "$ns" link set "${tag}c$i" name eth0
  ip -n "$ns" addr add "$subnet.$i/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip link set "${tag}h$i" master "$bridge"
  ip link set "${tag}h$i" up
  shape "${tag}h$i"                  # bridge -> host i (download)
  shape eth0 "$ns"                   # host i -> bridge (upload)
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

echo "emulated_cluster: $hosts hosts ($hostlist), links $rate via bridge $bridge ($subnet.254)" >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$direct" = 1 ]; then
  EMULATED_HOSTS=$hostlist EMULATED_AGENT=$workdir/agent EMULATED_TAG=$tag "$@"
else
  # shellcheck disable=SC2086
  mpirun --mca plm_rsh_agent "$workdir/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
    --mca mpi_yield_when_idle 1 --mca pml ob1 -H "$hostlist" -np "$hosts" -x PATH ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} $extra "$@"
fi
