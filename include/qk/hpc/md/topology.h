// GROMACS .top topologies, preprocessed and expanded to one list of atoms.
//
//   qk::md::Topology top = qk::md::read_top("topol.top");   // #include from GMXDATA
//   // top.num_atoms(), top.charge[i], top.mass[i], top.c6(top.type[i], top.type[j]), ...
//
// The preprocessor does what GROMACS's cpp does for force fields: #include
// "file" (searched relative to the including file, then in the directories
// given, then in GROMACS's share/gromacs/top: $GMXDATA/top, else
// /usr/share/gromacs/top), #define NAME [value] with whole-word substitution,
// #undef, #ifdef, #ifndef, #else, #endif. Directives read: [defaults]
// [atomtypes] [bondtypes] [angletypes] [pairtypes] [constrainttypes] (read as
// a table and used by no molecule we accept) [dihedraltypes] [moleculetype]
// [atoms] [bonds] [angles] [pairs] [dihedrals] [settles] [exclusions]
// [system] [molecules]. Any other directive (a molecule's [constraints],
// [nonbond_params], virtual sites, ...) is an error naming the file and line,
// as is a malformed line.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "qk/hpc/md/units.h"

namespace qk::md {

struct AtomType {
  std::string name;
  std::string bond_type;  // the bonded type ([bondtypes]/[angletypes] lookups); the name when absent
  double mass = 0;
  double charge = 0;
  double c6 = 0, c12 = 0;  // this type with itself, kJ mol^-1 nm^6 / nm^12
  double sigma = 0, epsilon = 0;  // as written, for combination rules 2 and 3
};

struct HarmonicBond {  // funct 1: V = kb/2 (r - b0)^2
  int i = 0, j = 0;
  double b0 = 0, kb = 0;
};
struct HarmonicAngle {  // funct 1: V = k/2 (theta - theta0)^2, theta0 in radians here
  int i = 0, j = 0, k = 0;
  double theta0 = 0, k_theta = 0;
};
struct LjPair {  // [pairs] funct 1: a 1-4 pair with its own LJ and fudgeQQ-scaled Coulomb
  int i = 0, j = 0;
  double c6 = 0, c12 = 0;
};
// [dihedrals], one entry per term (angles in radians here): funct 1 and 9 proper, periodic:
// V = k (1 + cos(n phi - phi0)) ("Proper Dih."; funct 9's several [dihedraltypes] lines for one quadruple
// are several entries); 4 periodic improper, the same formula ("Per. Imp. Dih."); 2 harmonic improper,
// V = k/2 (phi - phi0)^2 ("Improper Dih."); 3 Ryckaert-Bellemans, V = sum_n C_n cos^n(phi - 180 deg)
// ("Ryckaert-Bell."). phi is GROMACS's: IUPAC, 0 for cis.
struct Dihedral {
  int i = 0, j = 0, k = 0, l = 0;
  int funct = 1;
  double phi0 = 0, k_phi = 0;  // funct 1, 2, 4, 9
  int multiplicity = 0;        // funct 1, 4, 9
  std::array<double, 6> rb{};  // funct 3: C0..C5
};
struct VirtualSite3 {  // [virtual_sites3] funct 1: x_site = x_i + a (x_j - x_i) + b (x_k - x_i) (TIP4P's M)
  int site = 0, i = 0, j = 0, k = 0;
  double a = 0, b = 0;
};
struct PositionRestraint {  // [position_restraints] funct 1: V = sum_d k_d/2 (x_d - x_ref,d)^2
  int atom = 0;
  Vec3 k{};  // kJ mol^-1 nm^-2 per dimension
};
struct Settle {  // rigid water: atoms ow, ow+1, ow+2 (O, H, H)
  int ow = 0;
  double doh = 0, dhh = 0;
};

struct Topology {
  std::string system_name;
  // [defaults]
  int nbfunc = 1, comb_rule = 1;
  bool gen_pairs = false;
  double fudge_lj = 1, fudge_qq = 1;
  // Per atom type; the pair matrices are num_types x num_types.
  std::vector<AtomType> atom_types;
  std::vector<double> pair_c6, pair_c12;
  // Per atom, in the order of [molecules].
  std::vector<int> type;
  std::vector<double> charge, mass;
  std::vector<std::string> atom_name, residue_name;
  std::vector<int> residue_number;
  std::vector<std::vector<int>> exclusions;  // per atom, sorted, without itself
  std::vector<HarmonicBond> bonds;
  std::vector<HarmonicAngle> angles;
  std::vector<LjPair> pairs;
  std::vector<Dihedral> dihedrals;
  std::vector<Settle> settles;
  std::vector<VirtualSite3> vsites3;  // massless sites built from their atoms (vsite.h)
  std::vector<PositionRestraint> posres;  // to reference positions (position_restraints.h)
  struct FixedDistance {  // [constraints]: held by LINCS whatever the mdp's constraints
    int i = 0, j = 0;
    double length = 0;  // nm
  };
  std::vector<FixedDistance> constraints;
  struct MoleculeBlock {
    std::string name;
    int count = 0, atoms_per_molecule = 0;
  };
  std::vector<MoleculeBlock> molecules;

  int num_atoms() const { return static_cast<int>(type.size()); }
  int num_types() const { return static_cast<int>(atom_types.size()); }
  double c6(int ti, int tj) const { return pair_c6[static_cast<size_t>(ti) * atom_types.size() + tj]; }
  double c12(int ti, int tj) const { return pair_c12[static_cast<size_t>(ti) * atom_types.size() + tj]; }
  // Constraints removed from the degrees of freedom (3 per SETTLE).
  int num_constraints() const { return 3 * static_cast<int>(settles.size()); }
};

struct TopOptions {
  std::vector<std::string> defines;       // "NAME" or "NAME=VALUE" (the mdp's -D flags)
  std::vector<std::string> include_dirs;  // searched before GROMACS's top directory
};

Topology read_top(const std::string& path, const TopOptions& options = {});

// GROMACS's force-field directory: $GMXDATA/top, else /usr/share/gromacs/top.
std::string gromacs_top_dir();

}  // namespace qk::md
