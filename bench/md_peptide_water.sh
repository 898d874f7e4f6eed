#!/usr/bin/env bash
# A biomolecule end to end with qk md: the tetrapeptide of the peptide fixture
# (tests/fixtures/md_peptide.py) through gmx pdb2gmx (AMBER99SB-ILDN, hydrogens
# added), centred in a cube and solvated with SPC water by gmx solvate (gmx only
# prepares the files), then minimized by `qk md` (steep) and run by `qk md`
# (2 fs, h-bonds by LINCS, SETTLE water, V-rescale at 300 K on Protein and
# Non-Protein, as GROMACS's tutorials couple them). Prints the
# energy blocks' Temperature and Conserved En. and the Performance line.
#
#   bench/md_peptide_water.sh [BUILD_DIR] [NSTEPS] [BOX_NM]     # build/release 500 3
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build/release} NSTEPS=${2:-500} BOX=${3:-3}
QK=$(cd "$ROOT" && realpath "$BUILD/src/cli/qk")
command -v gmx >/dev/null || { echo "md_peptide_water.sh: gmx not found (apt-get install -y gromacs)" >&2; exit 1; }
W=$(mktemp -d /tmp/md-peptide.XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
python3 "$ROOT/tests/fixtures/md_peptide.py" > pep.pdb
gmx pdb2gmx -f pep.pdb -o pep.gro -p topol.top -ff amber99sb-ildn -water none -ignh >/dev/null 2>&1
gmx editconf -f pep.gro -o box.gro -box "$BOX" "$BOX" "$BOX" -c >/dev/null 2>&1
gmx solvate -cp box.gro -cs spc216.gro -p topol.top -o solv.gro >/dev/null 2>&1
# pdb2gmx -water none wrote no water include; SPC from the same force field.
sed -i 's/^\[ system \]/#include "amber99sb-ildn.ff\/spc.itp"\n\n[ system ]/' topol.top
common='cutoff-scheme = Verlet
coulombtype = PME
rcoulomb = 1.0
rvdw = 1.0
DispCorr = EnerPres
nstenergy = 100'
printf 'integrator = steep\nnsteps = 500\nemtol = 1000\nconstraints = none\n%s\n' "$common" > em.mdp
printf 'integrator = md\ndt = 0.002\nnsteps = %s\ntcoupl = V-rescale\ntc-grps = Protein Non-Protein\ntau_t = 0.1 0.1\nref_t = 300 300\ngen_vel = yes\ngen_temp = 300\ngen_seed = 3\nconstraints = h-bonds\n%s\n' \
  "$NSTEPS" "$common" > md.mdp
echo "# $(sed -n 2p solv.gro | tr -d ' ') atoms ($(awk '/^SOL/{print $2}' topol.top) waters), box $BOX nm"
"$QK" md -f em.mdp -c solv.gro -p topol.top -deffnm em | grep -E "converged|did not"
"$QK" md -f md.mdp -c em.gro -p topol.top -deffnm md >/dev/null
python3 - md.log <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
for i, l in enumerate(lines):
    if l.split() == ["Step", "Time"]:
        step, terms = lines[i + 1].split()[0], {}
        j = i + 4  # past "Energies (kJ/mol)": rows of names (15 wide) over rows of values
        while j + 1 < len(lines) and lines[j].strip():
            names = [lines[j][k:k + 15].strip() for k in range(0, len(lines[j]), 15)]
            terms.update(zip(names, lines[j + 1].split()))
            j += 2
        print(f"step {step}: Temperature {terms.get('Temperature')} K, Conserved En. {terms.get('Conserved En.')} kJ/mol")
PY
grep Performance md.log
