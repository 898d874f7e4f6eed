// .gro reading and writing (format: include/qk/hpc/md/gro.h).
#include "qk/hpc/md/gro.h"

#include <cstdio>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "text_fields.h"

namespace qk::md {
namespace {

// Splits text into lines without their '\n' (and a '\r' before it).
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t b = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string_view::npos) e = text.size();
    std::string_view l = text.substr(b, e - b);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    lines.push_back(l);
    b = e + 1;
  }
  return lines;
}

// GROMACS's rule: the distance between the first two decimal points after the
// four 5-wide name/number columns is the width of every coordinate field.
int field_width(std::string_view line, const std::string& file, int lineno) {
  size_t p1 = line.find('.', 20);
  size_t p2 = p1 == std::string_view::npos ? p1 : line.find('.', p1 + 1);
  QK_CHECK(p2 != std::string_view::npos, where(file, lineno),
           "expected an atom line with x y z after column 20 (e.g. '    1SOL     OW    1   0.126   1.624   1.679'), got '",
           line, "'");
  return static_cast<int>(p2 - p1);
}

}  // namespace

GroFile parse_gro(std::string_view text, const std::string& name) {
  std::vector<std::string_view> lines = lines_of(text);
  GroFile gro;
  QK_CHECK(lines.size() >= 2, where(name, static_cast<int>(lines.size()) + 1),
           "truncated .gro: expected a title line and the atom count");
  gro.title = std::string(trim(lines[0]));
  long long n = parse_int(lines[1], name, 2, "the atom count");
  QK_CHECK(n >= 0, where(name, 2), "expected a non-negative atom count, got ", n);
  QK_CHECK(static_cast<long long>(lines.size()) >= n + 3, where(name, static_cast<int>(lines.size()) + 1),
           "truncated .gro: the header says ", n, " atoms, so ", n + 3, " lines with the box line, but the file has ",
           lines.size());
  gro.atoms.resize(static_cast<size_t>(n));
  int width = n > 0 ? field_width(lines[2], name, 3) : 8;
  gro.precision = width - 5;
  QK_CHECK(gro.precision >= 1, where(name, 3), "coordinate fields ", width, " wide leave no decimals");
  for (long long a = 0; a < n; ++a) {
    const int lineno = static_cast<int>(a) + 3;
    std::string_view l = lines[static_cast<size_t>(a) + 2];
    QK_CHECK(l.size() >= static_cast<size_t>(20 + 3 * width), where(name, lineno), "atom ", a + 1,
             ": expected ", 20 + 3 * width, " columns (names, numbers, x y z of width ", width, "), got ", l.size());
    GroAtom& at = gro.atoms[static_cast<size_t>(a)];
    at.residue_number = static_cast<int>(parse_int(l.substr(0, 5), name, lineno, "a residue number in columns 1-5"));
    at.residue_name = std::string(trim(l.substr(5, 5)));
    at.atom_name = std::string(trim(l.substr(10, 5)));
    at.atom_number = static_cast<int>(parse_int(l.substr(15, 5), name, lineno, "an atom number in columns 16-20"));
    for (int d = 0; d < 3; ++d)
      at.x[d] = parse_double(l.substr(20 + d * width, width), name, lineno, "a coordinate");
    // Velocities: three more fields of the same width, on every line or none.
    bool has_v = trim(l.substr(20 + 3 * width)).size() > 0;
    if (a == 0) gro.has_velocities = has_v;
    QK_CHECK(has_v == gro.has_velocities, where(name, lineno), "atom ", a + 1,
             gro.has_velocities ? " has no velocities where the first atom has them"
                                : " has velocities where the first atom has none");
    if (has_v) {
      QK_CHECK(l.size() >= static_cast<size_t>(20 + 6 * width), where(name, lineno), "atom ", a + 1,
               ": velocities need ", 20 + 6 * width, " columns, the line has ", l.size());
      for (int d = 0; d < 3; ++d)
        at.v[d] = parse_double(l.substr(20 + (3 + d) * width, width), name, lineno, "a velocity");
    }
  }
  const int box_line = static_cast<int>(n) + 3;
  std::vector<std::string_view> b = split_whitespace(lines[static_cast<size_t>(n) + 2]);
  QK_CHECK(b.size() == 3 || b.size() == 9, where(name, box_line),
           "expected the box line (3 lengths, or 9 numbers for a triclinic box), got ", b.size(), " fields");
  for (int d = 0; d < 3; ++d) gro.box[d] = parse_double(b[d], name, box_line, "a box length");
  if (b.size() == 9)
    for (int k = 3; k < 9; ++k)
      QK_CHECK(parse_double(b[k], name, box_line, "a box vector component") == 0, where(name, box_line),
               "triclinic boxes are not supported by qk md yet (off-diagonal box components must be 0)");
  for (int d = 0; d < 3; ++d)
    QK_CHECK(gro.box[d] > 0, where(name, box_line), "box lengths must be positive, got ", gro.box[d]);
  return gro;
}

GroFile read_gro(const std::string& path) { return parse_gro(read_file(path), path); }

std::string format_gro(const GroFile& gro) {
  const int p = gro.precision, w = p + 5;
  std::string out = gro.title + "\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%5zu\n", gro.atoms.size());
  out += buf;
  for (const GroAtom& a : gro.atoms) {
    // Numbers wrap at 100000 as GROMACS writes them.
    int n = std::snprintf(buf, sizeof buf, "%5d%-5.5s%5.5s%5d%*.*f%*.*f%*.*f", a.residue_number % 100000,
                          a.residue_name.c_str(), a.atom_name.c_str(), a.atom_number % 100000, w, p, a.x[0], w,
                          p, a.x[1], w, p, a.x[2]);
    out.append(buf, static_cast<size_t>(n));
    if (gro.has_velocities) {
      n = std::snprintf(buf, sizeof buf, "%*.*f%*.*f%*.*f", w, p + 1, a.v[0], w, p + 1, a.v[1], w, p + 1, a.v[2]);
      out.append(buf, static_cast<size_t>(n));
    }
    out += '\n';
  }
  std::snprintf(buf, sizeof buf, "%10.5f%10.5f%10.5f\n", gro.box[0], gro.box[1], gro.box[2]);
  out += buf;
  return out;
}

void write_gro(const std::string& path, const GroFile& gro) { atomic_write_file(path, format_gro(gro)); }

}  // namespace qk::md
