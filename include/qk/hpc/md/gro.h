// GROMACS .gro coordinate files: read and write.
//
//   qk::md::GroFile conf = qk::md::read_gro("conf.gro");
//   // conf.atoms[i].x (nm), conf.atoms[i].v (nm/ps, when conf.has_velocities), conf.box
//   qk::md::write_gro("confout.gro", conf);
//
// The format is GROMACS's: a title line, the atom count, one fixed-column line
// per atom (residue number %5d, residue name %-5s, atom name %5s, atom number
// %5d, then x y z and optionally vx vy vz), and the box line. As GROMACS does,
// the precision is read from where the first atom line's decimal points sit
// (3 decimals, fields 8 wide, by default; a 9-decimal file has 14-wide fields).
// Only rectangular boxes (three box lengths, or nine numbers whose
// off-diagonal six are zero). Errors name the file and line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "qk/hpc/md/units.h"

namespace qk::md {

struct GroAtom {
  int residue_number = 0;
  std::string residue_name;
  std::string atom_name;
  int atom_number = 0;
  Vec3 x{};  // nm
  Vec3 v{};  // nm/ps (zero when the file has none)
};

struct GroFile {
  std::string title;
  std::vector<GroAtom> atoms;
  bool has_velocities = false;
  Vec3 box{};              // rectangular box lengths, nm
  int precision = 3;       // decimals of the positions (velocities get one more)
};

// Parses .gro text; `name` is used in error messages (a path).
GroFile parse_gro(std::string_view text, const std::string& name);
GroFile read_gro(const std::string& path);
std::string format_gro(const GroFile& gro);
void write_gro(const std::string& path, const GroFile& gro);

}  // namespace qk::md
