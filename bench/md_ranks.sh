#!/usr/bin/env bash
# qk md over ranks against gmx mdrun over ranks, on GROMACS's reference
# water box (../shared/peers/gromacs/run.sh: the 3x3x3 nm SPC box, 2,652
# atoms, minimized, md.tpr; or, with BOX, a BOX nm cube made the same way by
# bench/md_water_box.sh), in one run, configurations interleaved:
#   qk md, 1 rank x 1 thread; `qk run --nproc-per-node 2 -- qk md`, 2 ranks x
#   1 thread, with -decomp forces (md::ForceShare: the forces shared out,
#   replicated atoms) and -decomp domains (slabs along x with halos); qk md,
#   1 rank x 2 threads; gmx mdrun with 1 and 2 thread-MPI ranks of 1 OpenMP
#   thread (its domain decomposition) and 1 rank of 2 threads.
# The best ns/day of the repetitions, and their median (the machine may be shared).
#
#   bench/md_ranks.sh [build-dir] [qk-steps] [repeats] [box-nm]      (build/release 2000 3 3)
set -euo pipefail
BUILD=${1:-build/release}
STEPS=${2:-2000}
REPEATS=${3:-3}
BOX=${4:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEER=${GMX_PEER:-$ROOT/../shared/peers/gromacs}
QK=$(cd "$ROOT" && realpath "$BUILD/src/cli/qk")
[[ -x $QK ]] || { echo "md_ranks.sh: $QK not found; ninja -C $BUILD qk" >&2; exit 1; }
[[ -x $PEER/run.sh ]] || { echo "md_ranks.sh: no GROMACS recipe at $PEER/run.sh" >&2; exit 1; }
source "$(dirname "$0")/gmx_preflight.sh"
gmx_preflight md_ranks.sh "$PEER"
W=$(mktemp -d /tmp/md-ranks.XXXXXX)
trap 'rm -rf "$W"' EXIT
if [[ $BOX == 3 ]]; then
  "$PEER/run.sh" 1 "$W" | grep -E "GROMACS version|SIMD|Precision" >&2
else
  "$ROOT/bench/md_water_box.sh" "$BOX" "$W" "$PEER"
  (cd "$W" && gmx grompp -f "$PEER/md.mdp" -c em.gro -p topol.top -o md.tpr >/dev/null 2>&1)
fi

qk_run() {  # ranks threads [decomposition]
  local launch=() decomp=()
  [[ $1 -gt 1 ]] && launch=("$QK" run --nproc-per-node "$1" --) && decomp=(-decomp "$3")
  (cd "$W" && "${launch[@]}" "$QK" md -f "$PEER/md.mdp" -c em.gro -p topol.top -deffnm qk -nsteps "$STEPS" \
    -nt "$2" "${decomp[@]}" >/dev/null 2>&1)
  awk '/Performance:/{print $2}' "$W/qk.log"
}
gmx_run() {  # ranks threads-per-rank
  (cd "$W" && gmx mdrun -s md.tpr -deffnm md -ntmpi "$1" -ntomp "$2" -nsteps $((STEPS * 5 / 2)) -resethway \
    -noconfout >/dev/null 2>&1)
  awk '/Performance:/{print $2}' "$W/md.log"
}
declare -A got
qk_configs=("1 1" "2 1 forces" "2 1 domains" "1 2")
for ((r = 0; r < REPEATS; r++)); do
  for c in "${qk_configs[@]}"; do got["qk $c"]+="$(qk_run $c) "; done
  for c in "1 1" "2 1" "1 2"; do got["gmx $c"]+="$(gmx_run $c) "; done
  echo "round $((r + 1)): $(uptime)" >&2
done
best() { tr ' ' '\n' | grep -v '^$' | sort -g | tail -1; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END{print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "| ranks x threads | qk md ns/day best (median) | gmx mdrun ns/day best (median) | qk / GROMACS best (median) | qk vs its 1 x 1 |"
echo "|---|---:|---:|---:|---:|"
q11=$(echo "${got[qk 1 1]}" | best)
for c in "${qk_configs[@]}"; do
  q=$(echo "${got[qk $c]}" | best) qm=$(echo "${got[qk $c]}" | median)
  g=$(echo "${got[gmx ${c:0:3}]}" | best) gm=$(echo "${got[gmx ${c:0:3}]}" | median)
  echo "qk $c: ${got[qk $c]}; gmx ${c:0:3}: ${got[gmx ${c:0:3}]}" >&2
  awk -v c="$c" -v q="$q" -v qm="$qm" -v g="$g" -v gm="$gm" -v b="$q11" 'BEGIN{split(c, p, " ");
    name = p[1] " x " p[2] (p[3] ? " (" p[3] ")" : "");
    printf "| %s | %.1f (%.1f) | %.1f (%.1f) | %.2fx (%.2fx) | %.2fx |\n", name, q, qm, g, gm, q / g, qm / gm, q / b}'
done
