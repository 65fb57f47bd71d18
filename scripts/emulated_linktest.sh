#!/usr/bin/env bash
# Checks that scripts/emulated_cluster.sh gives the links it promises: the
# rate (tc tbf) and the added latency (-l: netem, or the user-space delay line).
#   1. a UDP ping-pong between host 1 and host 2 (python3 inside the netns):
#      round trip with and without -l; the added part must be 4x LATENCY
#      (host 1's link and host 2's link, each way) within -10 % .. +35 %
#      (a user-space delay line wakes up late on a busy machine, never early);
#   2. mgs-linktest (bench/replay/linktest.cc) on the latency cluster: a 64 MiB
#      MPI stream rank 0 -> 1 (must reach 85 % of RATE), an 8-byte MPI
#      ping-pong, and an allreduce.
# Prints one JSON line per measurement and PASS/FAIL; exit status 1 on FAIL.
#
# usage: scripts/emulated_linktest.sh [-b BUILD] [-n HOSTS] [-r RATE] [-l LATENCY] [-m MIB]
#   defaults: -b build -n 2 -r 1gbit -l 0.5ms -m 64
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
hosts=2
rate=1gbit
latency=0.5ms
mib=64
while getopts "b:n:r:l:m:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    n) hosts=$OPTARG ;;
    r) rate=$OPTARG ;;
    l) latency=$OPTARG ;;
    m) mib=$OPTARG ;;
    h) sed -n '2,15p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
[ "$hosts" -ge 2 ] || { echo "emulated_linktest: needs -n >= 2" >&2; exit 2; }
linktest=$PWD/$build/bench/mgs-linktest
[ -x "$linktest" ] || { echo "emulated_linktest: $linktest not built (--target mgs-linktest)" >&2; exit 2; }
case $latency in
  *ms) lat_us=$(awk -v v="${latency%ms}" 'BEGIN { print v * 1000 }') ;;
  *us) lat_us=${latency%us} ;;
  *) echo "emulated_linktest: -l wants e.g. 0.5ms or 500us" >&2; exit 2 ;;
esac
case $rate in
  *gbit) gbit=${rate%gbit} ;;
  *mbit) gbit=$(awk -v v="${rate%mbit}" 'BEGIN { print v / 1000 }') ;;
  *) echo "emulated_linktest: -r wants Ngbit or Nmbit" >&2; exit 2 ;;
esac

tmp=$(mktemp -d /tmp/emulated_linktest.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/udpping.py" <<'EOF'
# server: echo for 20 s of silence; client: 200 round trips, 5 ms apart.
import socket, statistics, sys, time
role, host = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if role == "server":
    s.bind((host, 9999))
    s.settimeout(20)
    try:
        while True:
            d, a = s.recvfrom(64)
            s.sendto(d, a)
    except socket.timeout:
        pass
else:
    # Until the server answers (python starts slowly on a busy machine).
    s.settimeout(0.2)
    for _ in range(100):
        try:
            s.sendto(b"x", (host, 9999))
            s.recvfrom(64)
            break
        except socket.timeout:
            pass
    s.settimeout(2)
    rtt = []
    for _ in range(200):
        t = time.perf_counter()
        s.sendto(b"x", (host, 9999))
        s.recvfrom(64)
        rtt.append(time.perf_counter() - t)
        time.sleep(0.005)
    print("%.1f %.1f" % (statistics.median(rtt) * 1e6, min(rtt) * 1e6))
EOF
ping_pair() {  # latency -> "median_us min_us"
  scripts/emulated_cluster.sh -n 2 -r "$rate" -l "$1" -s 10.78.0 -k -- bash -c \
    "ip netns exec \${EMULATED_TAG}ns2 python3 $tmp/udpping.py server 10.78.0.2 & srv=\$!;
     ip netns exec \${EMULATED_TAG}ns1 python3 $tmp/udpping.py client 10.78.0.2; kill \$srv" 2>"$tmp/ping.err"
}
ping_pair 0 > "$tmp/base" || true
ping_pair "$latency" > "$tmp/lat" || true
read -r base_med base_min < "$tmp/base" && read -r lat_med lat_min < "$tmp/lat" ||
  { echo "FAIL: the UDP ping-pong did not run:" >&2; cat "$tmp/ping.err" >&2; exit 1; }
added=$(awk -v a="$lat_med" -v b="$base_med" 'BEGIN { print a - b }')
want=$(awk -v l="$lat_us" 'BEGIN { print 4 * l }')
echo "{\"test\":\"udp_rtt\",\"rate\":\"$rate\",\"latency_us\":$lat_us,\"base_median_us\":$base_med,\"base_min_us\":$base_min,\"median_us\":$lat_med,\"min_us\":$lat_min,\"added_us\":$added,\"expected_added_us\":$want}"
fail=0
awk -v a="$added" -v w="$want" 'BEGIN { exit !(a >= 0.9 * w && a <= 1.35 * w) }' ||
  { echo "FAIL: added round trip ${added} us, expected ${want} us (-10 % .. +35 %)"; fail=1; }

scripts/emulated_cluster.sh -n "$hosts" -r "$rate" -l "$latency" -s 10.78.0 -- \
  "$linktest" --mib "$mib" --rate-gbit "$gbit" 2>/dev/null | grep '^{' | tee "$tmp/link.jsonl"
of_rate=$(sed -n 's/.*"test":"stream".*"of_rate":\([0-9.]*\).*/\1/p' "$tmp/link.jsonl")
awk -v r="${of_rate:-0}" 'BEGIN { exit !(r >= 0.85) }' ||
  { echo "FAIL: stream reached ${of_rate:-?} of $rate (want >= 0.85)"; fail=1; }
[ $fail = 0 ] && echo "PASS: rate $rate (stream ${of_rate} of it), added round trip ${added} us for 4 x ${lat_us} us"
exit $fail
