#!/usr/bin/env bash
# Hierarchical against flat-ring all-reduce across two simulated hosts joined
# by a shaped link, with the cost model's prediction.
#
#   sudo bench/hier_vs_flat.sh [BUILD_DIR] [RATE] [RANKS_PER_HOST] [MAX_BYTES]
#   sudo bench/hier_vs_flat.sh build/release 1gbit 2 64M
#
# Two network namespaces, a veth pair between them, a token-bucket filter
# (tc tbf) limiting each direction to RATE; one `qk run` agent per namespace
# (QCCL_HOST_ID tells the hosts apart, QCCL_SOCKET_IFNAME picks the veth), so
# ranks on one host use shared memory and the hosts talk TCP over the shaped
# link. `qk perf all_reduce` runs with QCCL_ALGO=ring, then hierarchical,
# then auto (the cost model's choice); QCCL_DEBUG=INFO logs each call's
# algorithm and predicted time. Needs root, ip and tc (Debian iproute2).
# tc netem (delay) is used when the kernel has it (NETEM_DELAY, e.g. 200us).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
RATE=${2:-1gbit}
PER_HOST=${3:-2}
MAX=${4:-64M}
ITERS=${ITERS:-5}
QK=$(realpath "$BUILD/src/cli/qk")
[ -x "$QK" ] || { echo "error: $QK not found; build the qk target first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "error: needs root (network namespaces, tc)" >&2; exit 1; }
command -v tc >/dev/null || { echo "error: tc not found; install iproute2" >&2; exit 1; }

NS=(qkbenchA qkbenchB); IF=(qkbva qkbvb); IP=(10.79.0.1 10.79.0.2)
OUT=$(mktemp -d)
cleanup() { ip netns del "${NS[0]}" 2>/dev/null || true; ip netns del "${NS[1]}" 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT
cleanup; OUT=$(mktemp -d)
for h in 0 1; do ip netns add "${NS[$h]}"; done
ip link add "${IF[0]}" type veth peer name "${IF[1]}"
for h in 0 1; do
  ip link set "${IF[$h]}" netns "${NS[$h]}"
  ip -n "${NS[$h]}" addr add "${IP[$h]}/24" dev "${IF[$h]}"
  ip -n "${NS[$h]}" link set "${IF[$h]}" up
  ip -n "${NS[$h]}" link set lo up
  shaping="tbf rate $RATE burst 256kb latency 100ms"
  if [ -n "${NETEM_DELAY:-}" ]; then shaping="netem rate $RATE delay $NETEM_DELAY"; fi
  ip netns exec "${NS[$h]}" tc qdisc add dev "${IF[$h]}" root $shaping
done

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 2 hosts x $PER_HOST ranks, link: $shaping"
export QK_STORE_TOKEN=0123456789abcdef0123456789abcdef
port=29611
for algo in ring hierarchical auto; do
  port=$((port + 1))
  for h in 1 0; do
    QCCL_HOST_ID="host-$h" QCCL_SOCKET_IFNAME="${IF[$h]}" QCCL_ALGO="$algo" QCCL_DEBUG=INFO QCCL_DEBUG_SUBSYS=COLL \
      ip netns exec "${NS[$h]}" "$QK" run --nnodes 2 --node-rank "$h" --nproc-per-node "$PER_HOST" \
      --master-addr "${IP[0]}" --master-port "$port" -- \
      "$QK" perf all_reduce -b 1M -e "$MAX" -f 4 -n "$ITERS" -w 1 -c 1 > "$OUT/$algo.$h.txt" 2>&1 &
  done
  wait
  grep -q "Out of bounds values : 0 OK" "$OUT/$algo.0.txt" || { cat "$OUT/$algo.0.txt"; echo "check failed ($algo)" >&2; exit 2; }
done

python3 - "$OUT" <<'PY'
import os, re, sys
d = sys.argv[1]
def table(algo):
    rows, pred, chosen = {}, {}, {}
    for line in open(os.path.join(d, algo + ".0.txt")):
        if not line.startswith("[rank0]: "):
            continue
        body = line[len("[rank0]: "):]
        m = re.search(r"allreduce #\d+ count (\d+) float32 sum \((\d+) bytes\).*algo (\w+).*predicted ([0-9.]+) us", body)
        if m:
            pred.setdefault(int(m.group(2)), float(m.group(4)))
            chosen.setdefault(int(m.group(2)), m.group(3))
            continue
        f = body.split()
        if len(f) >= 12 and f[0].isdigit() and f[2] == "float":
            rows[int(f[0])] = float(f[5])  # out-of-place time (us)
    return rows, pred, chosen
ring, ring_pred, _ = table("ring")
hier, hier_pred, _ = table("hierarchical")
auto, _, auto_algo = table("auto")
print("| size | ring (us) | ring predicted | hierarchical (us) | hierarchical predicted | speed-up measured | speed-up predicted | auto chose | auto (us) |")
print("|---:|---:|---:|---:|---:|---:|---:|---|---:|")
for s in sorted(ring):
    if s not in hier:
        continue
    rp, hp = ring_pred.get(s), hier_pred.get(s)
    print(f"| {s} | {ring[s]:.0f} | {rp if rp is not None else '-'} | {hier[s]:.0f} | {hp if hp is not None else '-'} | "
          f"{ring[s] / hier[s]:.2f}x | {(rp / hp) if rp and hp else float('nan'):.2f}x | {auto_algo.get(s, '-')} | {auto.get(s, float('nan')):.0f} |")
PY
