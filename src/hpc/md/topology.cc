// .top reading: the directives (include/qk/hpc/md/topology.h says which), on
// the preprocessor's lines, expanded into one list of atoms.
#include "qk/hpc/md/topology.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "preprocessor.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "text_fields.h"

namespace qk::md {
namespace {

struct MoleculeType {
  std::string name;
  int nrexcl = 0;
  std::string file;
  int line = 0;
  std::vector<int> type;
  std::vector<double> charge, mass;
  std::vector<std::string> atom_name, residue_name;
  std::vector<int> residue_number;
  std::vector<HarmonicBond> bonds;
  std::vector<std::pair<int, int>> connections;  // bonds of every funct, settles: for nrexcl
  std::vector<HarmonicAngle> angles;
  std::vector<LjPair> pairs;
  std::vector<std::pair<int, int>> pairs_to_look_up;  // [pairs] lines without parameters
  std::vector<Dihedral> dihedrals;
  std::vector<Settle> settles;
  std::vector<VirtualSite3> vsites3;
  std::vector<PositionRestraint> posres;
  std::vector<Topology::FixedDistance> constraints;
  std::vector<char> ptype;  // per atom: A (atom), D or V (virtual site)
  std::vector<std::pair<int, int>> exclusions;
};

// A two-type table's entry for (a, b) written either way round, or the table's end.
template <typename Table>
auto find_either_way(const Table& table, const std::string& a, const std::string& b) {
  auto p = table.find({a, b});
  return p != table.end() ? p : table.find({b, a});
}

// A whole number as a field: the two-type [dihedraltypes] form has its function type third.
bool is_integer(std::string_view t) {
  if (!t.empty() && (t.front() == '-' || t.front() == '+')) t.remove_prefix(1);
  return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
}

struct BondParams { double b0, kb; };
struct AngleParams { double theta0, k; };
struct PairParams { double v, w; };
// A [dihedraltypes] line: four bonded types ("X": any; the two-type form is X j k X), its function
// type and its numbers as written.
struct DihedralType {
  std::array<std::string, 4> types;
  int funct = 0;
  std::vector<double> params;
};

class TopReader {
 public:
  explicit TopReader(Topology* top) : top_(top) {}
  void line(const SourceLine& l);
  void finish(const std::string& path);

 private:
  [[noreturn]] void fail(const SourceLine& l, const std::string& msg) const {
    QK_THROW(ValueError, where(*l.file, l.line), msg);
  }
  void need_fields(const SourceLine& l, const std::vector<std::string_view>& f, size_t n, const char* form) const {
    if (f.size() < n)
      fail(l, "[ " + directive_ + " ]: expected " + form + ", got '" + std::string(trim(l.text)) + "'");
  }
  MoleculeType& molecule(const SourceLine& l) {
    if (moltypes_.empty()) fail(l, "[ " + directive_ + " ] before any [ moleculetype ]");
    return moltypes_.back();
  }
  // A 1-based atom number of the current molecule, checked.
  int atom_index(const SourceLine& l, std::string_view tok) {
    MoleculeType& m = molecule(l);
    long long a = parse_int(tok, *l.file, l.line, "an atom number");
    if (a < 1 || a > static_cast<long long>(m.type.size()))
      fail(l, "atom " + std::string(tok) + " is not in molecule " + m.name + " (it has " +
                  std::to_string(m.type.size()) + " atoms in [ atoms ] so far)");
    return static_cast<int>(a - 1);
  }
  int funct(const SourceLine& l, std::string_view tok, std::initializer_list<int> ok, const char* what) {
    long long f = parse_int(tok, *l.file, l.line, "a function type");
    for (int o : ok)
      if (f == o) return o;
    fail(l, "[ " + directive_ + " ] function type " + std::string(tok) + " is not supported by qk md (only " +
                what + ")");
  }
  double num(const SourceLine& l, std::string_view tok, const char* what) {
    return parse_double(tok, *l.file, l.line, what);
  }

  void defaults(const SourceLine& l, const std::vector<std::string_view>& f);
  void atomtype(const SourceLine& l, const std::vector<std::string_view>& f);
  void atom(const SourceLine& l, const std::vector<std::string_view>& f);
  void molecules(const SourceLine& l, const std::vector<std::string_view>& f);
  void dihedral(const SourceLine& l, const std::vector<std::string_view>& f);
  // The entry (one term) of a dihedral of function type fn from its numbers as written.
  Dihedral dihedral_term(const SourceLine& l, int fn, const std::vector<double>& p, std::array<int, 4> atoms);

  Topology* top_;
  std::string directive_;
  bool have_defaults_ = false;
  std::map<std::string, int> type_index_;
  std::vector<char> type_ptype_;
  std::map<std::pair<std::string, std::string>, BondParams> bondtypes_;
  std::map<std::pair<std::string, std::string>, double> constrainttypes_;  // b0
  std::map<std::tuple<std::string, std::string, std::string>, AngleParams> angletypes_;
  std::map<std::pair<std::string, std::string>, PairParams> pairtypes_;
  std::vector<DihedralType> dihedraltypes_;
  std::vector<MoleculeType> moltypes_;
  std::vector<std::pair<int, int>> molecule_list_;  // (moltype, count)
};

void TopReader::defaults(const SourceLine& l, const std::vector<std::string_view>& f) {
  if (have_defaults_) fail(l, "[ defaults ] given twice (a force field included twice?)");
  need_fields(l, f, 2, "nbfunc comb-rule [gen-pairs fudgeLJ fudgeQQ]");
  have_defaults_ = true;
  top_->nbfunc = static_cast<int>(parse_int(f[0], *l.file, l.line, "nbfunc"));
  if (top_->nbfunc != 1) fail(l, "nbfunc " + std::string(f[0]) + ": only 1 (Lennard-Jones) is supported");
  top_->comb_rule = static_cast<int>(parse_int(f[1], *l.file, l.line, "comb-rule"));
  if (top_->comb_rule < 1 || top_->comb_rule > 3) fail(l, "comb-rule must be 1, 2 or 3, got " + std::string(f[1]));
  if (f.size() > 2) {
    if (!iequals(f[2], "yes") && !iequals(f[2], "no")) fail(l, "gen-pairs must be yes or no");
    top_->gen_pairs = iequals(f[2], "yes");
  }
  if (f.size() > 3) top_->fudge_lj = num(l, f[3], "fudgeLJ");
  if (f.size() > 4) top_->fudge_qq = num(l, f[4], "fudgeQQ");
}

// Which optional columns an [atomtypes] line has is told by where the
// one-letter particle type sits (GROMACS's rule, push_at in toppush.cpp):
// name [bonded-type] [atomic-number] mass charge ptype V W.
void TopReader::atomtype(const SourceLine& l, const std::vector<std::string_view>& f) {
  need_fields(l, f, 6, "name [bond_type] [at.num] mass charge ptype V W");
  auto is_ptype = [&](size_t i) { return i < f.size() && f[i].size() == 1 && std::isalpha(f[i][0]); };
  bool has_bonded = false, has_atnum = false;
  if (is_ptype(3)) {
  } else if (is_ptype(5)) {
    has_bonded = has_atnum = true;
  } else if (is_ptype(4)) {
    (std::isalpha(static_cast<unsigned char>(f[1][0])) ? has_bonded : has_atnum) = true;
  } else {
    fail(l, "cannot find the particle type (A, D, S, V) in column 4, 5 or 6 of '" + std::string(trim(l.text)) + "'");
  }
  size_t c = 1 + has_bonded + has_atnum;
  need_fields(l, f, c + 5, "name [bond_type] [at.num] mass charge ptype V W");
  AtomType t;
  t.name = std::string(f[0]);
  t.bond_type = has_bonded ? std::string(f[1]) : t.name;
  t.mass = num(l, f[c], "the mass");
  t.charge = num(l, f[c + 1], "the charge");
  char ptype = static_cast<char>(std::toupper(static_cast<unsigned char>(f[c + 2][0])));
  double v = num(l, f[c + 3], "V (c6 or sigma)"), w = num(l, f[c + 4], "W (c12 or epsilon)");
  if (top_->comb_rule == 1) {
    t.c6 = v;
    t.c12 = w;
  } else {
    t.sigma = v;
    t.epsilon = w;
    t.c6 = 4 * w * std::pow(v, 6);
    t.c12 = 4 * w * std::pow(v, 12);
  }
  auto [it, fresh] = type_index_.emplace(t.name, top_->num_types());
  if (fresh) {  // a redefinition replaces the earlier one, as in grompp
    top_->atom_types.push_back(t);
    type_ptype_.push_back(ptype);
  } else {
    top_->atom_types[it->second] = t;
    type_ptype_[it->second] = ptype;
  }
}

void TopReader::atom(const SourceLine& l, const std::vector<std::string_view>& f) {
  MoleculeType& m = molecule(l);
  need_fields(l, f, 6, "nr type resnr residue atom cgnr [charge [mass]]");
  if (f.size() > 8) fail(l, "B-state (free-energy) columns in [ atoms ] are not supported by qk md");
  long long nr = parse_int(f[0], *l.file, l.line, "the atom number");
  if (nr != static_cast<long long>(m.type.size()) + 1)
    fail(l, "atoms must be numbered 1, 2, ... in order; expected " + std::to_string(m.type.size() + 1) + ", got " +
                std::string(f[0]));
  auto t = type_index_.find(std::string(f[1]));
  if (t == type_index_.end()) fail(l, "atom type '" + std::string(f[1]) + "' is not in any [ atomtypes ]");
  const char ptype = type_ptype_[t->second];
  if (ptype != 'A' && ptype != 'D' && ptype != 'V')
    fail(l, "atom type '" + std::string(f[1]) + "' has particle type " + std::string(1, ptype) +
                "; qk md supports atoms (A) and virtual sites (D, V), not shells");
  const AtomType& at = top_->atom_types[t->second];
  m.type.push_back(t->second);
  m.ptype.push_back(ptype);
  m.residue_number.push_back(static_cast<int>(parse_int(f[2], *l.file, l.line, "the residue number")));
  m.residue_name.emplace_back(f[3]);
  m.atom_name.emplace_back(f[4]);
  m.charge.push_back(f.size() > 6 ? num(l, f[6], "the charge") : at.charge);
  m.mass.push_back(f.size() > 7 ? num(l, f[7], "the mass") : at.mass);
}

void TopReader::molecules(const SourceLine& l, const std::vector<std::string_view>& f) {
  need_fields(l, f, 2, "molecule-name count");
  long long n = parse_int(f[1], *l.file, l.line, "the molecule count");
  if (n < 0) fail(l, "negative molecule count");
  for (size_t i = 0; i < moltypes_.size(); ++i)
    if (moltypes_[i].name == f[0]) {
      molecule_list_.emplace_back(static_cast<int>(i), static_cast<int>(n));
      return;
    }
  fail(l, "molecule '" + std::string(f[0]) + "' has no [ moleculetype ]");
}

void TopReader::line(const SourceLine& l) {
  std::string_view t = l.text;
  if (size_t c = t.find(';'); c != std::string_view::npos) t = t.substr(0, c);
  t = trim(t);
  // Lines starting with '*' are comments too (the AMBER force fields' banners; grompp reads them so).
  if (t.empty() || t.front() == '*') return;
  if (t.front() == '[') {
    if (t.back() != ']') fail(l, "expected '[ directive ]', got '" + std::string(t) + "'");
    directive_ = lower(trim(t.substr(1, t.size() - 2)));
    static const std::set<std::string> known = {
        "defaults",  "atomtypes", "bondtypes",  "angletypes", "pairtypes", "constrainttypes", "dihedraltypes",
        "moleculetype", "atoms",  "bonds",      "angles",     "pairs",     "dihedrals",       "settles",
        "exclusions", "virtual_sites3", "position_restraints", "constraints",
        "system",    "molecules"};
    if (!known.count(directive_))
      fail(l, "directive [ " + directive_ +
                  " ] is not supported by qk md (docs/md.md lists the directives it reads)");
    if ((directive_ == "atomtypes" || directive_ == "moleculetype") && !have_defaults_)
      fail(l, "[ " + directive_ + " ] before [ defaults ]: the force field's forcefield.itp must come first");
    return;
  }
  if (directive_.empty()) fail(l, "a line before any [ directive ]: '" + std::string(t) + "'");
  std::vector<std::string_view> f = split_whitespace(t);
  const std::string& d = directive_;
  if (d == "defaults") {
    defaults(l, f);
  } else if (d == "atomtypes") {
    atomtype(l, f);
  } else if (d == "bondtypes") {
    need_fields(l, f, 3, "bt1 bt2 funct [b0 kb]");
    if (parse_int(f[2], *l.file, l.line, "a function type") == 1 && f.size() >= 5)
      bondtypes_[{std::string(f[0]), std::string(f[1])}] = {num(l, f[3], "b0"), num(l, f[4], "kb")};
  } else if (d == "angletypes") {
    need_fields(l, f, 4, "at1 at2 at3 funct [theta0 k]");
    if (parse_int(f[3], *l.file, l.line, "a function type") == 1 && f.size() >= 6)
      angletypes_[{std::string(f[0]), std::string(f[1]), std::string(f[2])}] = {num(l, f[4], "theta0"),
                                                                              num(l, f[5], "k")};
  } else if (d == "pairtypes") {
    need_fields(l, f, 5, "at1 at2 funct V W");
    if (parse_int(f[2], *l.file, l.line, "a function type") == 1)
      pairtypes_[{std::string(f[0]), std::string(f[1])}] = {num(l, f[3], "V"), num(l, f[4], "W")};
  } else if (d == "dihedraltypes") {
    // "bi bj bk bl funct numbers", or the older two-type form "b1 b2 funct numbers": as grompp reads it,
    // the outer atoms' types for a harmonic improper (funct 2), the middle ones' for the rest.
    const bool two = f.size() >= 3 && is_integer(f[2]);
    need_fields(l, f, two ? 3 : 5, "bi bj bk bl funct [numbers] (or b1 b2 funct [numbers])");
    DihedralType t;
    const size_t first = two ? 3 : 5;
    t.funct = static_cast<int>(parse_int(f[first - 1], *l.file, l.line, "a function type"));
    const std::string a(f[0]), b(f[1]);
    t.types = !two             ? std::array<std::string, 4>{a, b, std::string(f[2]), std::string(f[3])}
              : t.funct == 2 ? std::array<std::string, 4>{a, "X", "X", b}
                             : std::array<std::string, 4>{"X", a, b, "X"};
    for (size_t k = first; k < f.size(); ++k) t.params.push_back(num(l, f[k], "a dihedral parameter"));
    dihedraltypes_.push_back(std::move(t));
  } else if (d == "constrainttypes") {
    need_fields(l, f, 3, "bt1 bt2 funct [b0]");
    const int fn = static_cast<int>(parse_int(f[2], *l.file, l.line, "the function type"));
    if ((fn == 1 || fn == 2) && f.size() >= 4) constrainttypes_[{std::string(f[0]), std::string(f[1])}] = num(l, f[3], "b0");
  } else if (d == "moleculetype") {
    need_fields(l, f, 2, "name nrexcl");
    MoleculeType m;
    m.name = std::string(f[0]);
    m.nrexcl = static_cast<int>(parse_int(f[1], *l.file, l.line, "nrexcl"));
    m.file = *l.file;
    m.line = l.line;
    for (const MoleculeType& o : moltypes_)
      if (o.name == m.name) fail(l, "molecule type '" + m.name + "' defined twice");
    moltypes_.push_back(std::move(m));
  } else if (d == "atoms") {
    atom(l, f);
  } else if (d == "bonds") {
    need_fields(l, f, 3, "ai aj funct [b0 kb]");
    MoleculeType& m = molecule(l);
    int i = atom_index(l, f[0]), j = atom_index(l, f[1]);
    int fn = funct(l, f[2], {1, 5}, "1 (harmonic) and 5 (connection)");
    m.connections.emplace_back(i, j);
    if (fn == 5) return;
    HarmonicBond b{i, j, 0, 0};
    if (f.size() >= 5) {
      b.b0 = num(l, f[3], "b0");
      b.kb = num(l, f[4], "kb");
    } else {
      const std::string& bi = top_->atom_types[m.type[i]].bond_type;
      const std::string& bj = top_->atom_types[m.type[j]].bond_type;
      const auto p = find_either_way(bondtypes_, bi, bj);
      if (p == bondtypes_.end()) fail(l, "no [ bondtypes ] entry for " + bi + "-" + bj + " (funct 1)");
      b.b0 = p->second.b0;
      b.kb = p->second.kb;
    }
    m.bonds.push_back(b);
  } else if (d == "angles") {
    need_fields(l, f, 4, "ai aj ak funct [theta0 k]");
    MoleculeType& m = molecule(l);
    HarmonicAngle a{atom_index(l, f[0]), atom_index(l, f[1]), atom_index(l, f[2]), 0, 0};
    funct(l, f[3], {1}, "1 (harmonic)");
    double theta0_deg = 0;
    if (f.size() >= 6) {
      theta0_deg = num(l, f[4], "theta0");
      a.k_theta = num(l, f[5], "k");
    } else {
      const std::string& bi = top_->atom_types[m.type[a.i]].bond_type;
      const std::string& bj = top_->atom_types[m.type[a.j]].bond_type;
      const std::string& bk = top_->atom_types[m.type[a.k]].bond_type;
      auto p = angletypes_.find({bi, bj, bk});
      if (p == angletypes_.end()) p = angletypes_.find({bk, bj, bi});
      if (p == angletypes_.end()) fail(l, "no [ angletypes ] entry for " + bi + "-" + bj + "-" + bk + " (funct 1)");
      theta0_deg = p->second.theta0;
      a.k_theta = p->second.k;
    }
    a.theta0 = theta0_deg * units::kPi / 180.0;
    m.angles.push_back(a);
  } else if (d == "pairs") {
    need_fields(l, f, 3, "ai aj funct [V W]");
    MoleculeType& m = molecule(l);
    int i = atom_index(l, f[0]), j = atom_index(l, f[1]);
    funct(l, f[2], {1}, "1 (LJ and Coulomb 1-4)");
    if (f.size() >= 5) {
      double v = num(l, f[3], "V"), w = num(l, f[4], "W");
      if (top_->comb_rule == 1) {
        m.pairs.push_back(LjPair{i, j, v, w});
      } else {
        m.pairs.push_back(LjPair{i, j, 4 * w * std::pow(v, 6), 4 * w * std::pow(v, 12)});
      }
    } else {
      m.pairs_to_look_up.emplace_back(i, j);
    }
  } else if (d == "dihedrals") {
    dihedral(l, f);
  } else if (d == "settles") {
    need_fields(l, f, 4, "OW funct doh dhh");
    MoleculeType& m = molecule(l);
    int ow = atom_index(l, f[0]);
    funct(l, f[1], {1}, "1");
    if (ow + 2 >= static_cast<int>(m.type.size()))
      fail(l, "[ settles ] needs atoms OW, OW+1, OW+2 in [ atoms ]");
    m.settles.push_back(Settle{ow, num(l, f[2], "doh"), num(l, f[3], "dhh")});
    m.connections.emplace_back(ow, ow + 1);
    m.connections.emplace_back(ow, ow + 2);
  } else if (d == "virtual_sites3") {
    need_fields(l, f, 7, "site ai aj ak funct a b");
    const int fn = static_cast<int>(parse_int(f[4], *l.file, l.line, "the function type"));
    if (fn != 1)
      fail(l, "[ virtual_sites3 ] function type " + std::to_string(fn) +
                  " is not supported by qk md (1: the site in the plane of three atoms, as TIP4P's M)");
    molecule(l).vsites3.push_back(VirtualSite3{atom_index(l, f[0]), atom_index(l, f[1]), atom_index(l, f[2]),
                                               atom_index(l, f[3]), num(l, f[5], "a"), num(l, f[6], "b")});
  } else if (d == "constraints") {
    need_fields(l, f, 3, "ai aj funct [b0]");
    MoleculeType& m = molecule(l);
    const int i = atom_index(l, f[0]), j = atom_index(l, f[1]);
    const int fn = funct(l, f[2], {1, 2}, "1 (and a bond for the exclusions) and 2 (no exclusions)");
    if (fn == 1) m.connections.emplace_back(i, j);
    double b0 = 0;
    if (f.size() >= 4) {
      b0 = num(l, f[3], "b0");
    } else {
      const std::string& bi = top_->atom_types[m.type[i]].bond_type;
      const std::string& bj = top_->atom_types[m.type[j]].bond_type;
      const auto p = find_either_way(constrainttypes_, bi, bj);
      if (p == constrainttypes_.end()) fail(l, "no [ constrainttypes ] entry for " + bi + "-" + bj);
      b0 = p->second;
    }
    if (!(b0 > 0)) fail(l, "a constraint length must be positive (flexible constraints are not supported)");
    m.constraints.push_back({i, j, b0});
  } else if (d == "position_restraints") {
    need_fields(l, f, 5, "ai funct fcx fcy fcz");
    const int fn = static_cast<int>(parse_int(f[1], *l.file, l.line, "the function type"));
    if (fn != 1)
      fail(l, "[ position_restraints ] function type " + std::to_string(fn) +
                  " is not supported by qk md (1: harmonic; flat-bottomed restraints are not)");
    molecule(l).posres.push_back(PositionRestraint{
        atom_index(l, f[0]), Vec3{num(l, f[2], "fcx"), num(l, f[3], "fcy"), num(l, f[4], "fcz")}});
  } else if (d == "exclusions") {
    need_fields(l, f, 2, "ai aj [ak ...]");
    int i = atom_index(l, f[0]);
    for (size_t k = 1; k < f.size(); ++k) molecule(l).exclusions.emplace_back(i, atom_index(l, f[k]));
  } else if (d == "system") {
    top_->system_name += (top_->system_name.empty() ? "" : " ") + std::string(t);
  } else if (d == "molecules") {
    molecules(l, f);
  }
}

Dihedral TopReader::dihedral_term(const SourceLine& l, int fn, const std::vector<double>& p, std::array<int, 4> a) {
  const size_t want = fn == 3 ? 6 : fn == 2 ? 2 : 3;
  if (p.size() != want)
    fail(l, "[ dihedrals ] function type " + std::to_string(fn) + " takes " + std::to_string(want) +
                (fn == 3 ? " numbers (C0..C5)" : fn == 2 ? " numbers (xi0 k)" : " numbers (phi0 k multiplicity)") +
                ", got " + std::to_string(p.size()));
  Dihedral d;
  d.i = a[0];
  d.j = a[1];
  d.k = a[2];
  d.l = a[3];
  d.funct = fn;
  if (fn == 3) {
    for (int n = 0; n < 6; ++n) d.rb[static_cast<size_t>(n)] = p[static_cast<size_t>(n)];
  } else {
    d.phi0 = p[0] * units::kPi / 180.0;
    d.k_phi = p[1];
    if (fn != 2) {
      if (p[2] != std::floor(p[2]) || p[2] < 0)
        fail(l, "[ dihedrals ]: the multiplicity must be a whole number >= 0, got " + std::to_string(p[2]));
      d.multiplicity = static_cast<int>(p[2]);
    }
  }
  return d;
}

void TopReader::dihedral(const SourceLine& l, const std::vector<std::string_view>& f) {
  need_fields(l, f, 5, "ai aj ak al funct [numbers]");
  MoleculeType& m = molecule(l);
  const std::array<int, 4> a{atom_index(l, f[0]), atom_index(l, f[1]), atom_index(l, f[2]), atom_index(l, f[3])};
  const int fn = funct(l, f[4], {1, 2, 3, 4, 9},
                       "1 and 9 (proper), 2 (harmonic improper), 3 (Ryckaert-Bellemans) and 4 (periodic improper)");
  if (f.size() > 5) {
    std::vector<double> p;
    for (size_t k = 5; k < f.size(); ++k) p.push_back(num(l, f[k], "a dihedral parameter"));
    m.dihedrals.push_back(dihedral_term(l, fn, p, a));
    return;
  }
  // [ dihedraltypes ] of the same kind (1 and 9 are one table, as in grompp) by the atoms' bonded types,
  // either way round, "X" matching any type: the match with the fewest X wins, the first in the file
  // among equals (grompp's rule). Funct 1 and 9 take that line and the consecutive ones with the same
  // four types (the terms of one dihedral: grompp 2022 gives a funct 1 dihedral all of them too); the
  // other functs the one line.
  auto same_table = [](int a, int b) { return a == b || ((a == 1 || a == 9) && (b == 1 || b == 9)); };
  std::array<std::string, 4> bt;
  for (int q = 0; q < 4; ++q) bt[static_cast<size_t>(q)] = top_->atom_types[m.type[a[static_cast<size_t>(q)]]].bond_type;
  int best = -1, best_score = -1;
  for (size_t e = 0; e < dihedraltypes_.size(); ++e) {
    const DihedralType& t = dihedraltypes_[e];
    if (!same_table(t.funct, fn)) continue;
    for (int dir = 0; dir < 2; ++dir) {
      int score = 0;
      bool ok = true;
      for (int q = 0; q < 4 && ok; ++q) {
        const std::string& want = t.types[static_cast<size_t>(dir == 0 ? q : 3 - q)];
        if (want == "X") continue;
        ok = want == bt[static_cast<size_t>(q)];
        ++score;
      }
      if (ok && score > best_score) {
        best = static_cast<int>(e);
        best_score = score;
      }
    }
  }
  if (best < 0)
    fail(l, "no [ dihedraltypes ] entry for function type " + std::to_string(fn) + " and " + bt[0] + "-" + bt[1] +
                "-" + bt[2] + "-" + bt[3]);
  const DihedralType& match = dihedraltypes_[static_cast<size_t>(best)];
  for (size_t e = static_cast<size_t>(best); e < dihedraltypes_.size(); ++e) {  // consecutive lines, as grompp
    const DihedralType& t = dihedraltypes_[e];
    if (!same_table(t.funct, fn) || t.types != match.types) break;
    m.dihedrals.push_back(dihedral_term(l, fn, t.params, a));
    if (fn != 1 && fn != 9) break;
  }
}

// Exclusions of one molecule: its atoms within nrexcl bonds, plus [ exclusions ].
std::vector<std::set<int>> molecule_exclusions(const MoleculeType& m) {
  const int n = static_cast<int>(m.type.size());
  std::vector<std::vector<int>> graph(n);
  for (auto [i, j] : m.connections) {
    graph[i].push_back(j);
    graph[j].push_back(i);
  }
  std::vector<std::set<int>> excl(n);
  for (int a = 0; a < n; ++a) {
    std::vector<int> frontier = {a}, dist(n, -1);
    dist[a] = 0;
    for (size_t q = 0; q < frontier.size(); ++q) {
      int u = frontier[q];
      if (dist[u] == m.nrexcl) continue;
      for (int v : graph[u])
        if (dist[v] < 0) {
          dist[v] = dist[u] + 1;
          frontier.push_back(v);
          excl[a].insert(v);
        }
    }
  }
  for (auto [i, j] : m.exclusions) {
    if (i == j) continue;
    excl[i].insert(j);
    excl[j].insert(i);
  }
  return excl;
}

void TopReader::finish(const std::string& path) {
  QK_CHECK(have_defaults_, where(path, 0), "no [ defaults ] (include a force field's forcefield.itp)");
  QK_CHECK(!molecule_list_.empty(), where(path, 0), "no [ molecules ]: the system is empty");
  Topology& top = *top_;
  // Pair parameters by the combination rule.
  const int nt = top.num_types();
  top.pair_c6.assign(static_cast<size_t>(nt) * nt, 0);
  top.pair_c12.assign(static_cast<size_t>(nt) * nt, 0);
  for (int a = 0; a < nt; ++a)
    for (int b = 0; b < nt; ++b) {
      const AtomType &ta = top.atom_types[a], &tb = top.atom_types[b];
      double c6, c12;
      if (top.comb_rule == 2) {  // Lorentz-Berthelot: arithmetic sigma, geometric epsilon
        double s = 0.5 * (ta.sigma + tb.sigma), e = std::sqrt(ta.epsilon * tb.epsilon);
        c6 = 4 * e * std::pow(s, 6);
        c12 = 4 * e * std::pow(s, 12);
      } else {  // 1 and 3: geometric c6 and c12
        c6 = std::sqrt(ta.c6 * tb.c6);
        c12 = std::sqrt(ta.c12 * tb.c12);
      }
      top.pair_c6[static_cast<size_t>(a) * nt + b] = c6;
      top.pair_c12[static_cast<size_t>(a) * nt + b] = c12;
    }
  // [pairs] without parameters: [ pairtypes ] by atom type, else generated (fudgeLJ x normal).
  for (MoleculeType& m : moltypes_)
    for (auto [i, j] : m.pairs_to_look_up) {
      const std::string &ni = top.atom_types[m.type[i]].bond_type, &nj = top.atom_types[m.type[j]].bond_type;
      const auto p = find_either_way(pairtypes_, ni, nj);
      if (p != pairtypes_.end()) {
        double v = p->second.v, w = p->second.w;
        m.pairs.push_back(top.comb_rule == 1 ? LjPair{i, j, v, w}
                                             : LjPair{i, j, 4 * w * std::pow(v, 6), 4 * w * std::pow(v, 12)});
      } else {
        QK_CHECK(top.gen_pairs, where(m.file, m.line), "molecule ", m.name, ": [ pairs ] ", i + 1, "-", j + 1,
                 " has no parameters, no [ pairtypes ] entry, and gen-pairs is no");
        m.pairs.push_back(LjPair{i, j, top.fudge_lj * top.c6(m.type[i], m.type[j]),
                                 top.fudge_lj * top.c12(m.type[i], m.type[j])});
      }
    }
  // Virtual sites: each one built by exactly one [ virtual_sites3 ] line, massless, from real atoms.
  for (const MoleculeType& m : moltypes_) {
    std::vector<int> built(m.type.size(), 0);
    for (const VirtualSite3& v : m.vsites3) {
      QK_CHECK(m.ptype[v.site] != 'A', where(m.file, m.line), "molecule ", m.name, ": atom ", v.site + 1,
               " is built by [ virtual_sites3 ] but its type's particle type is A (a virtual site has D or V)");
      for (int c : {v.i, v.j, v.k})
        QK_CHECK(m.ptype[c] == 'A', where(m.file, m.line), "molecule ", m.name, ": virtual site ", v.site + 1,
                 " is built from atom ", c + 1, ", itself a virtual site (qk md builds sites from atoms only)");
      ++built[v.site];
    }
    for (size_t a = 0; a < m.type.size(); ++a) {
      if (m.ptype[a] == 'A') continue;
      QK_CHECK(built[a] == 1, where(m.file, m.line), "molecule ", m.name, ": virtual site ", a + 1, " (",
               m.atom_name[a], ") is built by ", built[a], " [ virtual_sites3 ] lines; it needs exactly one");
      QK_CHECK(m.mass[a] == 0, where(m.file, m.line), "molecule ", m.name, ": virtual site ", a + 1, " (",
               m.atom_name[a], ") has mass ", m.mass[a], "; a virtual site is massless");
    }
  }
  // Expand the molecules.
  for (auto [mt, count] : molecule_list_) {
    const MoleculeType& m = moltypes_[mt];
    std::vector<std::set<int>> excl = molecule_exclusions(m);
    const int n = static_cast<int>(m.type.size());
    top.molecules.push_back(Topology::MoleculeBlock{m.name, count, n});
    for (int c = 0; c < count; ++c) {
      const int off = top.num_atoms();
      for (int a = 0; a < n; ++a) {
        top.type.push_back(m.type[a]);
        top.charge.push_back(m.charge[a]);
        top.mass.push_back(m.mass[a]);
        top.atom_name.push_back(m.atom_name[a]);
        top.residue_name.push_back(m.residue_name[a]);
        top.residue_number.push_back(m.residue_number[a]);
        std::vector<int> e;
        for (int b : excl[a]) e.push_back(b + off);
        top.exclusions.push_back(std::move(e));
      }
      for (HarmonicBond b : m.bonds) top.bonds.push_back({b.i + off, b.j + off, b.b0, b.kb});
      for (HarmonicAngle a : m.angles) top.angles.push_back({a.i + off, a.j + off, a.k + off, a.theta0, a.k_theta});
      for (LjPair p : m.pairs) top.pairs.push_back({p.i + off, p.j + off, p.c6, p.c12});
      for (Dihedral d : m.dihedrals) {
        d.i += off;
        d.j += off;
        d.k += off;
        d.l += off;
        top.dihedrals.push_back(d);
      }
      for (Settle s : m.settles) top.settles.push_back({s.ow + off, s.doh, s.dhh});
      for (VirtualSite3 v : m.vsites3) top.vsites3.push_back({v.site + off, v.i + off, v.j + off, v.k + off, v.a, v.b});
      for (PositionRestraint r : m.posres) top.posres.push_back({r.atom + off, r.k});
      for (Topology::FixedDistance c : m.constraints) top.constraints.push_back({c.i + off, c.j + off, c.length});
    }
  }
}

}  // namespace

QK_ENV_OPTIONAL_STRING(env_gmxdata, "GMXDATA",
                       "GROMACS's data folder: qk md looks for #include'd force fields in $GMXDATA/top "
                       "(default /usr/share/gromacs/top)");

std::string gromacs_top_dir() {
  const std::optional<std::string> data = env_gmxdata.lookup();
  return data && !data->empty() ? *data + "/top" : std::string("/usr/share/gromacs/top");
}

Topology read_top(const std::string& path, const TopOptions& options) {
  std::vector<std::string> dirs = options.include_dirs;
  dirs.push_back(gromacs_top_dir());
  Preprocessor pp(options.defines, dirs);
  std::vector<SourceLine> lines = pp.run(path);
  Topology top;
  TopReader reader(&top);
  for (const SourceLine& l : lines) reader.line(l);
  reader.finish(path);
  return top;
}

}  // namespace qk::md
