#!/usr/bin/env bash
# Builds an SPC water cube as ../shared/peers/gromacs/run.sh does (gmx solvate
# with spc216, OPLS-AA's spc.itp, steepest descent with the recipe's em.mdp)
# in DIR: water.gro, topol.top, em.gro (the minimized start). Used by
# bench/md_vs_gromacs.sh (BOX != 3) and bench/md_validate_water.sh.
#
#   bench/md_water_box.sh BOX_NM DIR [PEER_DIR]
set -euo pipefail
BOX=$1 DIR=$2
PEER=${3:-$(cd "$(dirname "$0")/.." && pwd)/../shared/peers/gromacs}
[[ -f $PEER/em.mdp ]] || { echo "md_water_box.sh: no em.mdp in $PEER" >&2; exit 1; }
mkdir -p "$DIR" && cd "$DIR"
gmx solvate -cs spc216 -box "$BOX" "$BOX" "$BOX" -o water.gro >/dev/null 2>&1
N=$(awk 'NR>2 && /SOL/ && /OW/{n++} END{print n}' water.gro)
printf '#include "oplsaa.ff/forcefield.itp"\n#include "oplsaa.ff/spc.itp"\n\n[ system ]\nSPC water box\n\n[ molecules ]\nSOL %d\n' \
  "$N" > topol.top
gmx grompp -f "$PEER/em.mdp" -c water.gro -p topol.top -o em.tpr >/dev/null 2>&1
gmx mdrun -s em.tpr -deffnm em -nt 2 -ntmpi 1 -ntomp 2 >em.out 2>&1 || {
  echo "md_water_box.sh: gmx mdrun (the minimization) failed in $DIR:" >&2
  sed -n '/Fatal error:/,/^---/p' em.out | grep -v '^---' >&2
  exit 1
}
echo "md_water_box.sh: $BOX nm cube, $N waters, $(sed -n 2p em.gro | tr -d ' ') atoms, minimized: $DIR/em.gro" >&2
