# Sourced by the md benchmarks: gmx_preflight NAME PEER_DIR checks that `gmx mdrun` runs on this machine
# (a 2.5 nm water box, 0 steps) and otherwise stops the script with GROMACS's own reason. Debian's gmx
# 2022.5 is built to read the clock with rdtscp; some virtual machines hide that instruction (an AMD
# EPYC VM did, 2026-12-07), and mdrun then refuses to start, which the benchmarks' quiet runs would hide.
gmx_preflight() {
  local name=$1 peer=$2 dir rc=0
  command -v gmx >/dev/null || { echo "$name: gmx not found (apt-get install -y gromacs)" >&2; exit 1; }
  dir=$(mktemp -d /tmp/gmx-preflight.XXXXXX)
  (cd "$dir" && gmx solvate -cs spc216 -box 2.5 2.5 2.5 -o w.gro >/dev/null 2>&1 &&
    printf '#include "oplsaa.ff/forcefield.itp"\n#include "oplsaa.ff/spc.itp"\n[ system ]\nw\n[ molecules ]\nSOL %d\n' \
      "$(awk 'NR>2 && /OW/{n++} END{print n}' w.gro)" > topol.top &&
    gmx grompp -f "$peer/em.mdp" -c w.gro -p topol.top -o w.tpr >/dev/null 2>&1 &&
    gmx mdrun -s w.tpr -deffnm w -nsteps 0 -nt 1 >mdrun.out 2>&1) || rc=$?
  if [[ $rc != 0 ]]; then
    echo "$name: gmx mdrun does not run on this machine, so there is no GROMACS figure to compare with:" >&2
    if [[ -f $dir/mdrun.out ]]; then
      sed -n '/Fatal error:/,/^---/p' "$dir/mdrun.out" | grep -v '^---' >&2
    else
      echo "  (gmx solvate or grompp failed in $dir)" >&2
    fi
    [[ -f $dir/mdrun.out ]] && rm -rf "$dir"
    exit 1
  fi
  rm -rf "$dir"
}
