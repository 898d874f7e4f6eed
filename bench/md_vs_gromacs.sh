#!/usr/bin/env bash
# qk md against gmx mdrun on GROMACS's reference water box, in one run:
# ../shared/peers/gromacs/run.sh builds and minimizes the 3x3x3 nm SPC box
# (2,652 atoms) and writes md.tpr; then, per thread count and repetition, back
# to back: `gmx mdrun` as run.sh runs it (5000 steps, -resethway) and md_run
# (the library behind `qk md`, bench/md_run.cc) on the same md.mdp, em.gro and
# topol.top. The best ns/day of the repetitions counts (the machine may be
# shared). MD_RUN_BEFORE=path/to/older/md_run adds a column for an older build.
# BOX=6.2 times a larger cube instead (6.2 nm: ~23,900 atoms), built the way
# run.sh builds its 3 nm one (gmx solvate, steepest descent with its em.mdp,
# then its md.mdp); GMX_STEPS sets gmx mdrun's steps (default 5000; -resethway
# times the second half).
#
#   bench/md_vs_gromacs.sh [build-dir] [qk-steps] [repeats] [threads...]
#   bench/md_vs_gromacs.sh build/md 2000 3 1 2
#   BOX=6.2 GMX_STEPS=1000 bench/md_vs_gromacs.sh build/release 300 2 1 2
set -euo pipefail
BUILD=${1:-build/md}
STEPS=${2:-2000}
REPEATS=${3:-3}
shift $(($# > 3 ? 3 : $#))
THREADS=("$@")
[[ ${#THREADS[@]} -gt 0 ]] || THREADS=(1 2)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEER=${GMX_PEER:-$ROOT/../shared/peers/gromacs}
MDRUN=$(cd "$ROOT" && realpath "$BUILD/bench/md_run")
BEFORE=${MD_RUN_BEFORE:-}
[[ -x $MDRUN ]] || { echo "md_vs_gromacs.sh: $MDRUN not found; ninja -C $BUILD md_run" >&2; exit 1; }
[[ -x $PEER/run.sh ]] || { echo "md_vs_gromacs.sh: no GROMACS recipe at $PEER/run.sh" >&2; exit 1; }
source "$(dirname "$0")/gmx_preflight.sh"
gmx_preflight md_vs_gromacs.sh "$PEER"
W=$(mktemp -d /tmp/md-vs-gmx.XXXXXX)
trap 'rm -rf "$W"' EXIT
BOX=${BOX:-3}
GMX_STEPS=${GMX_STEPS:-5000}
if [[ $BOX == 3 ]]; then
  "$PEER/run.sh" 1 "$W" | grep -E "GROMACS version|SIMD|Precision" >&2
else
  "$ROOT/bench/md_water_box.sh" "$BOX" "$W" "$PEER"
  (cd "$W" && gmx grompp -f "$PEER/md.mdp" -c em.gro -p topol.top -o md.tpr >/dev/null 2>&1)
fi

best() { sort -g | tail -1; }
qk_ns_day() {  # binary threads
  (cd "$W" && "$1" -f "$PEER/md.mdp" -c em.gro -p topol.top -deffnm qk -nsteps "$STEPS" -nt "$2" >/dev/null)
  awk '/Performance:/{print $2}' "$W/qk.log"
}
if [[ -n $BEFORE ]]; then
  echo "| threads | GROMACS ns/day | qk md before | qk md | before / GROMACS | qk / GROMACS |"
  echo "|---|---|---|---|---|---|"
else
  echo "| threads | GROMACS ns/day | qk md ns/day | qk / GROMACS |"
  echo "|---|---|---|---|"
fi
for T in "${THREADS[@]}"; do
  g=() q=() b=()
  for ((r = 0; r < REPEATS; r++)); do
    (cd "$W" && gmx mdrun -s md.tpr -deffnm md -nt "$T" -ntmpi 1 -ntomp "$T" -nsteps "$GMX_STEPS" -resethway -noconfout \
      >/dev/null 2>&1)
    g+=("$(awk '/Performance:/{print $2}' "$W/md.log")")
    q+=("$(qk_ns_day "$MDRUN" "$T")")
    [[ -z $BEFORE ]] || b+=("$(qk_ns_day "$BEFORE" "$T")")
  done
  G=$(printf '%s\n' "${g[@]}" | best)
  Q=$(printf '%s\n' "${q[@]}" | best)
  echo "threads $T: GROMACS ${g[*]}; qk ${q[*]}${BEFORE:+; before ${b[*]}}" >&2
  if [[ -n $BEFORE ]]; then
    B=$(printf '%s\n' "${b[@]}" | best)
    awk -v t="$T" -v g="$G" -v q="$Q" -v b="$B" \
      'BEGIN{printf "| %s | %.1f | %.1f | %.1f | %.2fx | %.2fx |\n", t, g, b, q, b / g, q / g}'
  else
    awk -v t="$T" -v g="$G" -v q="$Q" 'BEGIN{printf "| %s | %.1f | %.1f | %.2fx |\n", t, g, q, q / g}'
  fi
done
