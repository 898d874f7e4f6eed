// A fixture system of tests/fixtures/md: its inputs and GROMACS's step-0
// energies (reference.txt, "name<TAB>value" lines from gmx energy).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/gro.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"

namespace qk::md::test {

// The source tree: QK_SOURCE_DIR from the environment where set (a test program moved to another
// machine with the tree, as scripts/device-check.sh does), else where it was built.
inline std::string source_dir() {
  const char* env = std::getenv("QK_SOURCE_DIR");
  return env && *env ? std::string(env) : std::string(QK_SOURCE_DIR);
}

// The largest force's norm (tolerances relative to it).
inline double max_norm(const std::vector<Vec3>& f) {
  double m = 0;
  for (const Vec3& v : f) m = std::max(m, std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]));
  return m;
}

// Every energy term and the virial's nine components, in one vector (tests that compare all of them).
inline std::vector<double> terms_of(const PotentialTerms& e) {
  std::vector<double> t = {e.lj_sr,      e.disp_corr,  e.coulomb_sr,   e.coul_recip,   e.bond,
                           e.angle,      e.lj14,       e.coulomb14,    e.proper_dih,   e.rb_dih,
                           e.improper_dih, e.periodic_improper_dih, e.pres_dc, e.disp_corr_virial};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) t.push_back(e.virial[a][b]);
  return t;
}

// Every step-0 term must equal GROMACS's to this relative error (issue 34).
inline constexpr double kRelTol = 1e-4;

struct Fixture {
  std::string dir;
  GroFile conf;
  MdpOptions mdp;
  Topology top;
  std::map<std::string, double> reference;

  explicit Fixture(const std::string& system)
      : dir(source_dir() + "/tests/fixtures/md/" + system),
        conf(read_gro(dir + "/conf.gro")),
        mdp(read_mdp(dir + "/run.mdp")),
        top(read_top(dir + "/topol.top", TopOptions{mdp.defines, {}})) {
    std::ifstream in(dir + "/reference.txt");
    std::string line;
    while (std::getline(in, line)) {
      size_t tab = line.find('\t');
      if (tab != std::string::npos) reference[line.substr(0, tab)] = std::stod(line.substr(tab + 1));
    }
  }
  std::vector<Vec3> x() const {
    std::vector<Vec3> out;
    for (const GroAtom& a : conf.atoms) out.push_back(a.x);
    return out;
  }
  bool has_ref(const std::string& name) const { return reference.count(name) > 0; }
  double ref(const std::string& name) const {
    auto it = reference.find(name);
    if (it == reference.end()) ADD_FAILURE() << dir << "/reference.txt has no '" << name << "'";
    return it == reference.end() ? 0.0 : it->second;
  }
};

}  // namespace qk::md::test
