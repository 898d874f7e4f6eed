#include "index_groups.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "qk/base/error.h"
#include "text_fields.h"

namespace qk::md {

namespace {

// Residue name (lower case) -> type, from residuetypes.dat; empty when the file is absent.
std::map<std::string, std::string> residue_types(const std::string& path) {
  std::map<std::string, std::string> types;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<std::string_view> f = split_whitespace(line);
    if (f.size() >= 2) types.emplace(lower(f[0]), std::string(f[1]));
  }
  return types;
}

std::vector<int> atoms_where(int n, auto&& keep) {
  std::vector<int> a;
  for (int i = 0; i < n; ++i)
    if (keep(i)) a.push_back(i);
  return a;
}

}  // namespace

std::string residuetypes_path() { return gromacs_top_dir() + "/residuetypes.dat"; }

std::vector<AtomGroup> default_groups(const Topology& top, const std::string& residuetypes) {
  const int n = top.num_atoms();
  std::vector<AtomGroup> groups;
  groups.push_back({"System", atoms_where(n, [](int) { return true; })});
  const std::map<std::string, std::string> table = residue_types(residuetypes);
  // Each atom's residue type ("Other" for names the table lacks), and the types in order of appearance.
  std::vector<std::string> type(n);
  std::vector<std::string> seen;
  for (int i = 0; i < n; ++i) {
    const auto it = table.find(lower(top.residue_name[i]));
    type[i] = it != table.end() ? it->second : "Other";
    bool known = false;
    for (const std::string& s : seen) known = known || s == type[i];
    if (!known) seen.push_back(type[i]);
  }
  if (table.empty()) seen.clear();  // without the table no atom's type is known
  auto of_type = [&](const std::string& t, bool in) {
    return atoms_where(n, [&](int i) { return iequals(type[i], t) == in; });
  };
  bool other_done = false;  // a residue type beyond Protein, Water and Ion: its group, then the groups by name
  for (const std::string& t : seen) {
    std::vector<int> a = of_type(t, true);
    if (iequals(t, "Protein")) {
      groups.push_back({"Protein", a});
      std::vector<int> rest = of_type("Protein", false);
      if (!rest.empty()) groups.push_back({"non-Protein", rest});
    } else if (iequals(t, "Water")) {
      groups.push_back({t, a});
      groups.push_back({"SOL", a});
      std::vector<int> rest = of_type("Water", false);
      if (!rest.empty()) groups.push_back({"non-Water", rest});
    } else if (iequals(t, "Ion")) {
      groups.push_back({t, a});
    } else if (!other_done) {
      groups.push_back({t, a});
      other_done = true;
    }
  }
  // With such a type (or without the table), the residues that are not Protein, DNA, RNA or Water, one group
  // per name.
  std::vector<std::string> names;
  std::set<std::string> named;
  for (int i = 0; (other_done || table.empty()) && i < n; ++i) {
    const bool other = table.empty() || !(iequals(type[i], "Protein") || iequals(type[i], "DNA") ||
                                          iequals(type[i], "RNA") || iequals(type[i], "Water"));
    if (other && named.insert(top.residue_name[i]).second) names.push_back(top.residue_name[i]);
  }
  for (const std::string& name : names)
    groups.push_back({name, atoms_where(n, [&](int i) { return top.residue_name[i] == name; })});
  const std::vector<int> water = of_type("Water", true), ions = of_type("Ion", true);
  if (!table.empty() && !water.empty() && !ions.empty()) {
    std::vector<int> both = atoms_where(n, [&](int i) { return iequals(type[i], "Water") || iequals(type[i], "Ion"); });
    groups.push_back({"Water_and_ions", both});
  }
  return groups;
}

std::vector<AtomGroup> read_ndx(const std::string& path, int num_atoms) {
  std::ifstream in(path);
  QK_CHECK(in.good(), "cannot read the index file ", path);
  std::vector<AtomGroup> groups;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string_view t = trim(line);
    if (t.empty() || t[0] == ';') continue;
    if (t.front() == '[') {
      QK_CHECK(t.back() == ']' && t.size() > 2, where(path, lineno), "expected a group header [ name ], got '", t,
               "'");
      const std::string_view name = trim(t.substr(1, t.size() - 2));
      QK_CHECK(!name.empty(), where(path, lineno), "a group header without a name");
      groups.push_back({std::string(name), {}});
      continue;
    }
    QK_CHECK(!groups.empty(), where(path, lineno), "atom numbers before the first [ group ] header");
    for (std::string_view tok : split_whitespace(t)) {
      const long long a = parse_int(tok, path, lineno, "an atom number");
      QK_CHECK(a >= 1 && a <= num_atoms, where(path, lineno), "atom ", a, " of group ", groups.back().name,
               " is outside the system's 1..", num_atoms);
      groups.back().atoms.push_back(static_cast<int>(a - 1));
    }
  }
  for (AtomGroup& g : groups) {
    std::sort(g.atoms.begin(), g.atoms.end());
    g.atoms.erase(std::unique(g.atoms.begin(), g.atoms.end()), g.atoms.end());
  }
  return groups;
}

std::vector<AtomGroup> run_groups(const Topology& top, const std::string& index_file) {
  std::vector<AtomGroup> groups = default_groups(top, residuetypes_path());
  if (!index_file.empty())
    for (AtomGroup& g : read_ndx(index_file, top.num_atoms())) groups.push_back(std::move(g));
  return groups;
}

const AtomGroup& find_group(const std::vector<AtomGroup>& groups, const std::string& name, const std::string& what) {
  for (auto it = groups.rbegin(); it != groups.rend(); ++it)
    if (iequals(it->name, name)) return *it;
  std::string have;
  for (const AtomGroup& g : groups) have += (have.empty() ? "" : ", ") + g.name;
  QK_THROW(ValueError, what, ": no group named '", name, "' (the groups are: ", have,
           "; make others with gmx make_ndx and pass the index file with -n)");
}

}  // namespace qk::md
