#!/usr/bin/env bash
# qk md against gmx mdrun on the same SPC water box (issue 34, part 5):
#  1. NVE energy drift: both engines run the recipe's md.mdp without a
#     thermostat (gen-vel 300 K, same seed) for NVE_PS; the drift is the
#     least-squares slope of "Total Energy" in each md.log (kJ/mol/ps) after
#     NVE_SKIP_PS, per atom and per ns; GROMACS's own "Conserved energy drift"
#     line beside it.
#  2. Structure: both run the recipe's NVT md.mdp (V-rescale 300 K) for NVT_PS
#     with positions every ps (.trr); `gmx rdf` computes the O-O radial
#     distribution of each trajectory after EQ_PS. Reported: the first peak
#     (position, height), the first minimum, and the RMS difference of the two
#     g(r) against the RMS difference between the two halves of GROMACS's own
#     run (the statistical error at this length). In NVT the density is the
#     box's and the same for both (reported).
#
#   bench/md_validate_water.sh [build-dir] [threads] [box-nm]
#   NVE_PS=20 NVT_PS=100 EQ_PS=20 bench/md_validate_water.sh build/release 2
set -euo pipefail
BUILD=${1:-build/release}
T=${2:-2}
BOX=${3:-3}
NVE_PS=${NVE_PS:-20}
NVE_SKIP_PS=${NVE_SKIP_PS:-1}
NVT_PS=${NVT_PS:-100}
EQ_PS=${EQ_PS:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEER=${GMX_PEER:-$ROOT/../shared/peers/gromacs}
MDRUN=$(cd "$ROOT" && realpath "$BUILD/bench/md_run")
[[ -x $MDRUN ]] || { echo "md_validate_water.sh: $MDRUN not found; ninja -C $BUILD md_run" >&2; exit 1; }
source "$(dirname "$0")/gmx_preflight.sh"
gmx_preflight md_validate_water.sh "$PEER"
W=${KEEP_DIR:-$(mktemp -d /tmp/md-validate.XXXXXX)}
[[ -n ${KEEP_DIR:-} ]] || trap 'rm -rf "$W"' EXIT
"$ROOT/bench/md_water_box.sh" "$BOX" "$W" "$PEER"
cd "$W"
NATOMS=$(sed -n 2p em.gro | tr -d ' ')
steps() { awk -v ps="$1" 'BEGIN{printf "%d", ps / 0.002 + 0.5}'; }

# mdp VARIANT: the recipe's md.mdp with the run's length and outputs.
mdp() {
  local kind=$1 nsteps=$2
  grep -vE '^(nsteps|nstenergy|nstlog|nstxout|tcoupl|tc[-_]grps|tau[-_]t|ref[-_]t)\b' "$PEER/md.mdp"
  printf 'nsteps = %s\nnstenergy = 50\nnstlog = 50\nnstcalcenergy = 50\n' "$nsteps"
  if [[ $kind == nve ]]; then
    printf 'tcoupl = no\n'
  else
    printf 'tcoupl = V-rescale\ntc-grps = System\ntau-t = 0.1\nref-t = 300\nnstxout = 500\n'
  fi
}
# TERM (a name of md.log's energy blocks; GROMACS's and qk's share the layout) per block: "time value" lines.
term() {
  awk -v name="$1" '/^ +Step +Time/ { getline; t = $2 }
       /A V E R A G E S/ { exit }
       index($0, name) { line = $0; getline vals;
         for (k = 0; k * 15 < length(line); k++) if (index(substr(line, k * 15 + 1, 15), name)) {
           print t, substr(vals, k * 15 + 1, 15) + 0 } }' "$2"
}
slope() { awk '{ n++; sx += $1; sy += $2; sxx += $1 * $1; sxy += $1 * $2 }
               END { printf "%.6g", (n * sxy - sx * sy) / (n * sxx - sx * sx) }'; }

echo "== NVE drift: $NATOMS atoms, $NVE_PS ps, $T threads" >&2
mdp nve "$(steps "$NVE_PS")" > nve.mdp
gmx grompp -f nve.mdp -c em.gro -p topol.top -o nve.tpr >/dev/null 2>&1
gmx mdrun -s nve.tpr -deffnm gmx_nve -nt "$T" -ntmpi 1 -ntomp "$T" >/dev/null 2>&1
"$MDRUN" -f nve.mdp -c em.gro -p topol.top -deffnm qk_nve -nt "$T" >/dev/null
# Without a thermostat the conserved energy is the total (GROMACS's NVE blocks print only the latter).
# The fit starts at NVE_SKIP_PS: the first step's energy jumps in both engines (gen-vel's v(-dt/2) against
# the leap-frog average), which GROMACS's own drift line includes.
G=$(term "Total Energy" gmx_nve.log | awk -v s="$NVE_SKIP_PS" '$1 >= s' | slope)
Q=$(term "Total Energy" qk_nve.log | awk -v s="$NVE_SKIP_PS" '$1 >= s' | slope)
GOWN=$(grep -E "Conserved energy drift" gmx_nve.log | awk '{print $4}')
echo "| engine | Total Energy slope after $NVE_SKIP_PS ps (kJ/mol/ps) | per atom per ns (kJ/mol) | GROMACS's own line, whole run (kJ/mol/ps per atom) |"
echo "|---|---:|---:|---:|"
awk -v g="$G" -v n="$NATOMS" -v own="$GOWN" 'BEGIN{printf "| gmx mdrun | %.4g | %.3g | %s |\n", g, g / n * 1000, own}'
awk -v q="$Q" -v n="$NATOMS" 'BEGIN{printf "| qk md | %.4g | %.3g | |\n", q, q / n * 1000}'

echo "== NVT structure: $NVT_PS ps, O-O g(r) after $EQ_PS ps" >&2
mdp nvt "$(steps "$NVT_PS")" > nvt.mdp
gmx grompp -f nvt.mdp -c em.gro -p topol.top -o nvt.tpr >/dev/null 2>&1
gmx mdrun -s nvt.tpr -deffnm gmx_nvt -nt "$T" -ntmpi 1 -ntomp "$T" >/dev/null 2>&1
"$MDRUN" -f nvt.mdp -c em.gro -p topol.top -deffnm qk_nvt -nt "$T" >/dev/null
rdf() {  # trr out.xvg begin end
  printf 'name OW\n' | gmx rdf -f "$1" -s nvt.tpr -ref "name OW" -sel "name OW" -o "$2" -b "$3" -e "$4" -bin 0.01 \
    >/dev/null 2>&1
  grep -vE '^[@#]' "$2"
}
MID=$(awk -v a="$EQ_PS" -v b="$NVT_PS" 'BEGIN{print (a + b) / 2}')
rdf gmx_nvt.trr g.xvg "$EQ_PS" "$NVT_PS" > g.txt
rdf qk_nvt.trr q.xvg "$EQ_PS" "$NVT_PS" > q.txt
rdf gmx_nvt.trr g1.xvg "$EQ_PS" "$MID" > g1.txt
rdf gmx_nvt.trr g2.xvg "$MID" "$NVT_PS" > g2.txt
features() {  # g(r) file: first peak r and height, first minimum after it
  awk '{ r[NR] = $1; g[NR] = $2 } END {
         p = 1; for (i = 1; i <= NR; i++) if (g[i] > g[p]) p = i;
         m = p; for (i = p; i <= NR && r[i] < r[p] + 0.25; i++) if (g[i] < g[m]) m = i;
         printf "%.3f nm, %.3f | %.3f nm, %.3f", r[p], g[p], r[m], g[m] }' "$1"
}
rms() { paste "$1" "$2" | awk '$1 > 0.2 { n++; d = $2 - $4; s += d * d } END { printf "%.4f", sqrt(s / n) }'; }
echo
echo "| O-O g(r), $EQ_PS-$NVT_PS ps | first peak (r, g) | first minimum (r, g) |"
echo "|---|---|---|"
echo "| gmx mdrun | $(features g.txt) |"
echo "| qk md | $(features q.txt) |"
echo
echo "RMS of g(r) differences over r > 0.2 nm: qk vs gmx $(rms q.txt g.txt); gmx's two halves $(rms g1.txt g2.txt)"
echo "density: $(awk -v n="$NATOMS" -v b="$BOX" 'BEGIN{printf "%.1f kg/m^3 (both: NVT, same box and molecules)", n / 3 * 18.0154 / 6.02214076e23 / (b * 1e-9) ^ 3 / 1000}')"
