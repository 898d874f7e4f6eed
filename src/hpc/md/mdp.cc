// .mdp parsing (what is accepted: include/qk/hpc/md/mdp.h).
#include "qk/hpc/md/mdp.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "text_fields.h"

namespace qk::md {
namespace {

// GROMACS treats '-' and '_' alike in keys; we also ignore case.
std::string normalize_key(std::string_view key) {
  std::string k = lower(trim(key));
  for (char& c : k)
    if (c == '_') c = '-';
  return k;
}

struct Line {
  const std::string& file;
  int line;
  std::string key;  // as written, for messages
  std::string value;
};

[[noreturn]] void bad_value(const Line& l, std::string_view accepted) {
  QK_THROW(ValueError, where(l.file, l.line), l.key, " = ", l.value, ": qk md supports only ", accepted);
}

// The value as whitespace-separated numbers (tau-t, ref-t: one per tc group).
std::vector<double> numbers(const Line& l) {
  std::vector<double> v;
  for (std::string_view tok : split_whitespace(l.value)) v.push_back(parse_double(tok, l.file, l.line, l.key));
  if (v.empty()) bad_value(l, "one number per tc-grps group");
  return v;
}

// value must be one of `choices` (case-insensitive); returns its index.
int choose(const Line& l, std::initializer_list<const char*> choices, std::string_view accepted) {
  int i = 0;
  for (const char* c : choices) {
    if (iequals(l.value, c)) return i;
    ++i;
  }
  bad_value(l, accepted);
}

bool yes_no(const Line& l) { return choose(l, {"no", "yes"}, "yes or no") == 1; }
double number(const Line& l) { return parse_double(l.value, l.file, l.line, l.key); }
long long integer(const Line& l) { return parse_int(l.value, l.file, l.line, l.key); }

using Handler = std::function<void(MdpOptions&, const Line&)>;

const std::map<std::string, Handler>& handlers() {
  static const std::map<std::string, Handler> table = {
      {"integrator",
       [](MdpOptions& o, const Line& l) {
         o.integrator = choose(l, {"md", "steep"}, "md (leap-frog) and steep") == 0 ? Integrator::kMd
                                                                                    : Integrator::kSteep;
       }},
      {"tinit", [](MdpOptions& o, const Line& l) { o.tinit = number(l); }},
      {"dt", [](MdpOptions& o, const Line& l) { o.dt = number(l); }},
      {"nsteps", [](MdpOptions& o, const Line& l) { o.nsteps = integer(l); }},
      {"emtol", [](MdpOptions& o, const Line& l) { o.emtol = number(l); }},
      {"emstep", [](MdpOptions& o, const Line& l) { o.emstep = number(l); }},
      {"cutoff-scheme", [](MdpOptions&, const Line& l) { choose(l, {"verlet"}, "Verlet"); }},
      {"pbc", [](MdpOptions&, const Line& l) { choose(l, {"xyz"}, "xyz"); }},
      {"coulombtype",
       [](MdpOptions& o, const Line& l) {
         o.coulomb_type = choose(l, {"pme", "reaction-field"}, "PME and Reaction-Field") == 0
                              ? CoulombType::kPme
                              : CoulombType::kReactionField;
       }},
      {"coulomb-modifier",
       [](MdpOptions&, const Line& l) {
         choose(l, {"potential-shift-verlet", "potential-shift"}, "Potential-shift(-Verlet), GROMACS's default");
       }},
      {"rcoulomb", [](MdpOptions& o, const Line& l) { o.rcoulomb = number(l); }},
      {"epsilon-r", [](MdpOptions& o, const Line& l) { o.epsilon_r = number(l); }},
      {"epsilon-rf", [](MdpOptions& o, const Line& l) { o.epsilon_rf = number(l); }},
      {"vdwtype", [](MdpOptions&, const Line& l) { choose(l, {"cut-off"}, "Cut-off"); }},
      {"vdw-type", [](MdpOptions&, const Line& l) { choose(l, {"cut-off"}, "Cut-off"); }},
      {"vdw-modifier",
       [](MdpOptions&, const Line& l) {
         choose(l, {"potential-shift-verlet", "potential-shift"}, "Potential-shift(-Verlet), GROMACS's default");
       }},
      {"rvdw", [](MdpOptions& o, const Line& l) { o.rvdw = number(l); }},
      {"nstlist",
       [](MdpOptions& o, const Line& l) {
         const long long n = integer(l);
         if (n < 1) bad_value(l, "a positive number of steps");
         o.nstlist = static_cast<int>(std::min<long long>(n, 1 << 30));
       }},
      {"verlet-buffer-tolerance",
       [](MdpOptions& o, const Line& l) {
         const double t = number(l);
         if (!(t > 0 || t == -1)) bad_value(l, "a drift in kJ/mol/ps per atom above 0, or -1 (no estimate)");
         o.verlet_buffer_tolerance = t;
       }},
      {"dispcorr",
       [](MdpOptions& o, const Line& l) {
         static constexpr DispCorr kinds[] = {DispCorr::kNo, DispCorr::kEnerPres, DispCorr::kEner};
         o.disp_corr = kinds[choose(l, {"no", "enerpres", "ener"}, "no, EnerPres and Ener")];
       }},
      {"fourierspacing", [](MdpOptions& o, const Line& l) { o.fourier_spacing = number(l); }},
      {"fourier-nx", [](MdpOptions& o, const Line& l) { o.fourier_nx = static_cast<int>(integer(l)); }},
      {"fourier-ny", [](MdpOptions& o, const Line& l) { o.fourier_ny = static_cast<int>(integer(l)); }},
      {"fourier-nz", [](MdpOptions& o, const Line& l) { o.fourier_nz = static_cast<int>(integer(l)); }},
      {"pme-order", [](MdpOptions& o, const Line& l) { o.pme_order = static_cast<int>(integer(l)); }},
      {"ewald-rtol", [](MdpOptions& o, const Line& l) { o.ewald_rtol = number(l); }},
      {"ewald-geometry", [](MdpOptions&, const Line& l) { choose(l, {"3d"}, "3d"); }},
      {"epsilon-surface",
       [](MdpOptions&, const Line& l) {
         if (number(l) != 0) bad_value(l, "0 (no dipole correction)");
       }},
      {"tcoupl",
       [](MdpOptions& o, const Line& l) {
         o.tcoupl = choose(l, {"no", "v-rescale"}, "no and V-rescale") == 0 ? Thermostat::kNo : Thermostat::kVRescale;
       }},
      {"nsttcouple", [](MdpOptions& o, const Line& l) { o.nsttcouple = static_cast<int>(integer(l)); }},
      {"tc-grps",
       [](MdpOptions& o, const Line& l) {
         o.tc_grps.clear();
         for (std::string_view tok : split_whitespace(l.value)) o.tc_grps.emplace_back(tok);
         if (o.tc_grps.empty()) bad_value(l, "one or more group names (System, Protein Non-Protein, ...)");
       }},
      {"tau-t", [](MdpOptions& o, const Line& l) { o.tau_t = numbers(l); }},
      {"ref-t", [](MdpOptions& o, const Line& l) { o.ref_t = numbers(l); }},
      {"pcoupl",
       [](MdpOptions& o, const Line& l) {
         o.pcoupl = choose(l, {"no", "c-rescale"}, "no and C-rescale (Berendsen and Parrinello-Rahman: use C-rescale, "
                                                   "which samples the same ensemble as the latter)") == 0
                        ? Barostat::kNo
                        : Barostat::kCRescale;
       }},
      {"pcoupltype", [](MdpOptions&, const Line& l) { choose(l, {"isotropic"}, "isotropic"); }},
      {"nstpcouple", [](MdpOptions& o, const Line& l) { o.nstpcouple = static_cast<int>(integer(l)); }},
      {"tau-p", [](MdpOptions& o, const Line& l) { o.tau_p = number(l); }},
      {"compressibility", [](MdpOptions& o, const Line& l) { o.compressibility = number(l); }},
      {"ref-p",
       [](MdpOptions& o, const Line& l) {
         o.ref_p = number(l);
         o.ref_p_given = true;
       }},
      {"refcoord-scaling",
       [](MdpOptions& o, const Line& l) {
         o.refcoord_scaling = choose(l, {"no", "com"}, "no and com") == 0 ? RefCoordScaling::kNo : RefCoordScaling::kCom;
       }},
      {"ld-seed", [](MdpOptions& o, const Line& l) { o.ld_seed = integer(l); }},
      {"gen-vel", [](MdpOptions& o, const Line& l) { o.gen_vel = yes_no(l); }},
      {"gen-temp", [](MdpOptions& o, const Line& l) { o.gen_temp = number(l); }},
      {"gen-seed", [](MdpOptions& o, const Line& l) { o.gen_seed = integer(l); }},
      {"continuation", [](MdpOptions& o, const Line& l) { o.continuation = yes_no(l); }},
      {"unconstrained-start", [](MdpOptions& o, const Line& l) { o.continuation = yes_no(l); }},
      {"constraints",
       [](MdpOptions& o, const Line& l) {
         static constexpr Constraints kinds[] = {Constraints::kNone, Constraints::kHBonds, Constraints::kAllBonds};
         o.constraints = kinds[choose(l, {"none", "h-bonds", "all-bonds"},
                                      "none, h-bonds and all-bonds (SETTLE for [ settles ] water, LINCS for the bonds)")];
       }},
      {"constraint-algorithm", [](MdpOptions&, const Line& l) { choose(l, {"lincs"}, "lincs (for h-bonds)"); }},
      {"comm-mode",
       [](MdpOptions& o, const Line& l) {
         o.comm_mode = choose(l, {"linear", "none"}, "Linear and None") == 0 ? CommMode::kLinear : CommMode::kNone;
       }},
      {"nstcomm", [](MdpOptions& o, const Line& l) { o.nstcomm = static_cast<int>(integer(l)); }},
      {"comm-grps", [](MdpOptions&, const Line& l) { choose(l, {"system"}, "one group, System"); }},
      {"nstenergy", [](MdpOptions& o, const Line& l) { o.nstenergy = static_cast<int>(integer(l)); }},
      {"nstcalcenergy",
       [](MdpOptions& o, const Line& l) {
         const long long n = integer(l);
         if (n < -1) bad_value(l, "a number of steps (0: only the nstenergy steps; -1: GROMACS's default, 100)");
         o.nstcalcenergy = n == -1 ? 100 : static_cast<int>(std::min<long long>(n, 1 << 30));
       }},
      {"nstxout", [](MdpOptions& o, const Line& l) { o.nstxout = static_cast<int>(integer(l)); }},
      {"nstvout", [](MdpOptions& o, const Line& l) { o.nstvout = static_cast<int>(integer(l)); }},
      {"nstfout", [](MdpOptions& o, const Line& l) { o.nstfout = static_cast<int>(integer(l)); }},
      {"nstxout-compressed",
       [](MdpOptions& o, const Line& l) { o.nstxout_compressed = static_cast<int>(integer(l)); }},
      {"compressed-x-precision", [](MdpOptions& o, const Line& l) { o.compressed_x_precision = number(l); }},
      {"compressed-x-grps", [](MdpOptions&, const Line& l) { choose(l, {"system"}, "System (every atom)"); }},
      {"define",
       [](MdpOptions& o, const Line& l) {
         for (std::string_view tok : split_whitespace(l.value)) {
           QK_CHECK(tok.size() > 2 && tok.substr(0, 2) == "-D", where(l.file, l.line),
                    "define: expected -DNAME or -DNAME=VALUE, got '", tok, "'");
           o.defines.emplace_back(tok.substr(2));
         }
       }},
  };
  return table;
}

}  // namespace

const std::vector<IgnoredMdpKey>& mdp_keys_without_effect() {
  static const std::vector<IgnoredMdpKey> keys = {
      {"title", "a label only"},
      {"include", "qk md searches the including file's folder and GROMACS's top directory"},
      {"rlist", "the list radius comes from verlet-buffer-tolerance (as GROMACS); with -1 qk md keeps exact lists "
                "instead of using rlist"},
      {"nstlog", "md.log's energy blocks follow nstenergy"},
      {"energygrps", "only one energy group (System) is reported"},
      {"cpp", "the preprocessor is built in"},
  };
  return keys;
}

MdpOptions parse_mdp(std::string_view text, const std::string& name) {
  MdpOptions o;
  o.source = name;
  std::set<std::string> ignored;
  for (const IgnoredMdpKey& k : mdp_keys_without_effect()) ignored.insert(k.key);
  std::map<std::string, int> seen;  // key -> line, for duplicates
  int lineno = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string_view::npos) e = text.size();
    std::string_view raw = text.substr(pos, e - pos);
    pos = e + 1;
    ++lineno;
    if (size_t c = raw.find(';'); c != std::string_view::npos) raw = raw.substr(0, c);
    std::string_view l = trim(raw);
    if (l.empty()) continue;
    size_t eq = l.find('=');
    QK_CHECK(eq != std::string_view::npos, where(name, lineno), "expected 'key = value', got '", l, "'");
    std::string key = normalize_key(l.substr(0, eq));
    std::string value(trim(l.substr(eq + 1)));
    QK_CHECK(!key.empty(), where(name, lineno), "missing key before '='");
    auto [it, fresh] = seen.emplace(key, lineno);
    QK_CHECK(fresh, where(name, lineno), "'", trim(l.substr(0, eq)), "' is set twice (first on line ", it->second,
             ")");
    if (ignored.count(key)) {
      o.keys_without_effect.push_back(key);
      continue;
    }
    auto h = handlers().find(key);
    QK_CHECK(h != handlers().end(), where(name, lineno), "mdp key '", trim(l.substr(0, eq)),
             "' is not supported by qk md (docs/md.md lists the keys it reads; remove the line or run GROMACS)");
    if (value.empty() && key != "define") continue;  // GROMACS: an empty value keeps the default
    h->second(o, Line{name, lineno, std::string(trim(l.substr(0, eq))), value});
  }
  QK_CHECK(o.dt > 0, where(name, 0), "dt must be positive, got ", o.dt);
  QK_CHECK(o.pme_order >= 3 && o.pme_order <= 12, where(name, 0), "pme-order must be 3..12, got ", o.pme_order);
  QK_CHECK(o.ewald_rtol > 0 && o.ewald_rtol < 1, where(name, 0), "ewald-rtol must be in (0, 1), got ", o.ewald_rtol);
  QK_CHECK(o.rcoulomb > 0 && o.rvdw > 0, where(name, 0), "rcoulomb and rvdw must be positive");
  QK_CHECK(o.rcoulomb == o.rvdw, where(name, 0), "qk md needs rcoulomb == rvdw (got ", o.rcoulomb, " and ",
           o.rvdw, "); different cut-offs are not written yet");
  for (auto [key, v] : {std::pair{"nstenergy", o.nstenergy}, {"nstxout", o.nstxout}, {"nstvout", o.nstvout},
                        {"nstfout", o.nstfout}, {"nstxout-compressed", o.nstxout_compressed}})
    QK_CHECK(v >= 0, where(name, 0), key, " must be >= 0 (0: never), got ", v);
  // As grompp: energies are computed at most as often as they are written, and the written steps are
  // among the computed ones (so the .edr's sums are exact).
  if (o.nstenergy > 0 && o.nstcalcenergy > o.nstenergy) o.nstcalcenergy = o.nstenergy;
  QK_CHECK(o.nstcalcenergy <= 0 || o.nstenergy % o.nstcalcenergy == 0, where(name, 0), "nstenergy (", o.nstenergy,
           ") must be a multiple of nstcalcenergy (", o.nstcalcenergy, "), so that the energy file's averages are "
           "exact; set nstenergy = ", (o.nstenergy / o.nstcalcenergy + 1) * o.nstcalcenergy, " (grompp rounds it up)");
  QK_CHECK(o.compressed_x_precision > 0, where(name, 0), "compressed-x-precision must be positive, got ",
           o.compressed_x_precision);
  if (o.integrator != Integrator::kMd) o.pcoupl = Barostat::kNo;  // as grompp: a minimization keeps the box
  if (o.pcoupl != Barostat::kNo) {
    QK_CHECK(o.compressibility > 0 && o.ref_p_given, where(name, 0),
             "pcoupl = C-rescale needs compressibility (1/bar, 4.5e-5 for water) and ref-p (bar)");
    QK_CHECK(o.tau_p > 0, where(name, 0), "tau-p must be positive (ps), got ", o.tau_p);
    QK_CHECK(o.tcoupl != Thermostat::kNo, where(name, 0),
             "pcoupl = C-rescale needs temperature coupling (tcoupl = V-rescale): its noise is at the "
             "thermostat's temperature (grompp refuses it too)");
    QK_CHECK(o.nstpcouple == -1 || o.nstpcouple > 0, where(name, 0), "nstpcouple must be positive or -1, got ",
             o.nstpcouple);
  }
  if (o.tcoupl != Thermostat::kNo) {
    QK_CHECK(o.tau_t.size() == o.tc_grps.size() && o.ref_t.size() == o.tc_grps.size(), where(name, 0), "tc-grps names ",
             o.tc_grps.size(), " group(s), tau-t has ", o.tau_t.size(), " value(s) and ref-t ", o.ref_t.size(),
             "; give one of each per group, in the same order");
    for (size_t g = 0; g < o.tau_t.size(); ++g) {
      QK_CHECK(o.tau_t[g] > 0 || o.tau_t[g] == -1, where(name, 0), "tau-t of group ", o.tc_grps[g],
               " must be > 0 (ps), or -1 for a group left uncoupled; got ", o.tau_t[g]);
      QK_CHECK(o.ref_t[g] >= 0, where(name, 0), "ref-t of group ", o.tc_grps[g], " must be >= 0 K, got ", o.ref_t[g]);
    }
  }
  return o;
}

MdpOptions read_mdp(const std::string& path) { return parse_mdp(read_file(path), path); }

}  // namespace qk::md
