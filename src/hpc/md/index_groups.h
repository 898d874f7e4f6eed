// Atom groups as GROMACS names them: the default groups grompp and
// make_ndx make from a topology (gmx's index.cpp analyse(): System, then by
// residue type from GROMACS's residuetypes.dat: Protein and non-Protein,
// Water, SOL and non-Water, Ion, Water_and_ions, and the other residues by
// type and by name), and the groups of an index file (.ndx, `-n`), which
// come after them and win on a name both have. The mdp's tc-grps name them.
#pragma once

#include <string>
#include <vector>

#include "qk/hpc/md/topology.h"

namespace qk::md {

struct AtomGroup {
  std::string name;
  std::vector<int> atoms;  // 0-based, ascending
};

// GROMACS's default groups of `top`. `residuetypes` is the path of
// residuetypes.dat ("RES<whitespace>Type" lines); when the file is absent
// only System and the groups by residue name are made.
std::vector<AtomGroup> default_groups(const Topology& top, const std::string& residuetypes);
// The default path: residuetypes.dat in GROMACS's top directory.
std::string residuetypes_path();

// The groups of a GROMACS index file: "[ name ]" headers, then 1-based atom
// numbers; errors name the file and line. `num_atoms` bounds the numbers.
std::vector<AtomGroup> read_ndx(const std::string& path, int num_atoms);

// What tc-grps can name in a run: the default groups, then the index file's
// (none when `index_file` is empty).
std::vector<AtomGroup> run_groups(const Topology& top, const std::string& index_file);

// The group called `name` (case-insensitive, as grompp), the last of that
// name; an error naming `what` and the groups there are when none is.
const AtomGroup& find_group(const std::vector<AtomGroup>& groups, const std::string& name, const std::string& what);

}  // namespace qk::md
