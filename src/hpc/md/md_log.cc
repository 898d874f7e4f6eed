#include "md_log.h"

#include <algorithm>
#include <cstdio>
#include <initializer_list>

namespace qk::md {

std::vector<std::pair<std::string, double>> energy_terms(const EnergyFrame& e, const Topology& top,
                                                         const MdpOptions& mdp) {
  const PotentialTerms& p = e.potential;
  std::vector<std::pair<std::string, double>> t;
  if (!top.bonds.empty()) t.emplace_back("Bond", p.bond);
  if (!top.angles.empty()) t.emplace_back("Angle", p.angle);
  // GROMACS's order of the interaction functions: PDIHS, RBDIHS, IDIHS, PIDIHS.
  auto has = [&](std::initializer_list<int> fns) {
    return std::any_of(top.dihedrals.begin(), top.dihedrals.end(), [&](const Dihedral& d) {
      return std::find(fns.begin(), fns.end(), d.funct) != fns.end();
    });
  };
  if (has({1, 9})) t.emplace_back("Proper Dih.", p.proper_dih);
  if (has({3})) t.emplace_back("Ryckaert-Bell.", p.rb_dih);
  if (has({2})) t.emplace_back("Improper Dih.", p.improper_dih);
  if (has({4})) t.emplace_back("Per. Imp. Dih.", p.periodic_improper_dih);
  if (!top.pairs.empty()) {
    t.emplace_back("LJ-14", p.lj14);
    t.emplace_back("Coulomb-14", p.coulomb14);
  }
  t.emplace_back("LJ (SR)", p.lj_sr);
  if (mdp.disp_corr != DispCorr::kNo) t.emplace_back("Disper. corr.", p.disp_corr);
  t.emplace_back("Coulomb (SR)", p.coulomb_sr);
  if (mdp.coulomb_type == CoulombType::kPme) t.emplace_back("Coul. recip.", p.coul_recip);
  if (!top.posres.empty()) t.emplace_back("Position Rest.", p.posres);
  t.emplace_back("Potential", p.potential());
  if (mdp.integrator == Integrator::kMd) {
    t.emplace_back("Kinetic En.", e.kinetic);
    t.emplace_back("Total Energy", e.total);
    if (mdp.tcoupl != Thermostat::kNo) t.emplace_back("Conserved En.", e.conserved);  // as GROMACS: NVE has none
    t.emplace_back("Temperature", e.temperature);
    if (mdp.disp_corr == DispCorr::kEnerPres) t.emplace_back("Pres. DC (bar)", p.pres_dc);
    t.emplace_back("Pressure (bar)", e.pressure);
    if (e.constr_rmsd) t.emplace_back("Constr. rmsd", *e.constr_rmsd);  // as GROMACS: LINCS's, not SETTLE's
  } else {
    if (mdp.disp_corr == DispCorr::kEnerPres) t.emplace_back("Pres. DC (bar)", p.pres_dc);
  }
  return t;
}

namespace {

// Names over values, five a row, as mdrun's energy blocks.
void write_terms(std::ostream& out, const std::vector<std::pair<std::string, double>>& t) {
  char buf[128];
  for (size_t row = 0; row < t.size(); row += 5) {
    std::string names, values;
    for (size_t k = row; k < std::min(t.size(), row + 5); ++k) {
      std::snprintf(buf, sizeof buf, "%15s", t[k].first.c_str());
      names += buf;
      std::snprintf(buf, sizeof buf, "%15.5e", t[k].second);
      values += buf;
    }
    out << names << "\n" << values << "\n";
  }
}

}  // namespace

void write_energy_block(std::ostream& out, const EnergyFrame& e, const Topology& top, const MdpOptions& mdp) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%15s%15s\n%15lld%15.5f\n\n", "Step", "Time", static_cast<long long>(e.step), e.time);
  out << buf << "   Energies (kJ/mol)\n";
  write_terms(out, energy_terms(e, top, mdp));
  out << "\n";
}

void write_averages(std::ostream& out, const std::vector<EdrTerm>& terms, const EdrSums& sums, int64_t steps,
                    const Topology& top, const MdpOptions& mdp) {
  if (sums.nsum_run == 0 || sums.esum_run.size() != terms.size()) return;
  auto average = [&](size_t k) { return sums.esum_run[k] / static_cast<double>(sums.nsum_run); };
  auto index_of = [&](const std::string& name) {
    for (size_t k = 0; k < terms.size(); ++k)
      if (terms[k].name == name) return k;
    return terms.size();
  };
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "\t<======  ###############  ==>\n\t<====  A V E R A G E S  ====>\n\t<==  ###############  ======>\n\n"
                "\tStatistics over %lld steps using %lld frames\n\n",
                static_cast<long long>(steps), static_cast<long long>(sums.nsum_run));
  out << buf << "   Energies (kJ/mol)\n";
  // md.log's terms lead the .edr's, in order (edr_terms), under their log names.
  EnergyFrame names_only;  // the terms this run's frames had
  if (index_of("Constr. rmsd") < terms.size()) names_only.constr_rmsd = 0;
  std::vector<std::pair<std::string, double>> t = energy_terms(names_only, top, mdp);
  for (size_t k = 0; k < t.size() && k < terms.size(); ++k) t[k].second = average(k);
  write_terms(out, t);
  // The box's average under pressure coupling, as mdrun.
  if (const size_t bx = index_of("Box-X"); bx + 2 < terms.size()) {
    out << "\n";
    write_terms(out, {{"Box-X", average(bx)}, {"Box-Y", average(bx + 1)}, {"Box-Z", average(bx + 2)}});
  }
  const char* axes = "XYZ";
  for (const auto& [title, prefix] : {std::pair{"Total Virial (kJ/mol)", "Vir-"}, {"Pressure (bar)", "Pres-"}}) {
    if (index_of(std::string(prefix) + "XX") == terms.size()) continue;
    out << "\n   " << title << "\n";
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 3; ++b) {
        std::snprintf(buf, sizeof buf, "%15.5e", average(index_of(std::string(prefix) + axes[a] + axes[b])));
        out << buf;
      }
      out << "\n";
    }
  }
  out << "\n\n";
}

void edr_terms(const EnergyFrame& e, const Topology& top, const MdpOptions& mdp, std::vector<EdrTerm>* terms,
               std::vector<double>* values) {
  terms->clear();
  values->clear();
  auto add = [&](std::string name, std::string unit, double v) {
    terms->push_back({std::move(name), std::move(unit)});
    values->push_back(v);
  };
  for (auto& [name, v] : energy_terms(e, top, mdp)) {
    const std::string bar = " (bar)";
    if (name.size() > bar.size() && name.compare(name.size() - bar.size(), bar.size(), bar) == 0) {
      add(name.substr(0, name.size() - bar.size()), "bar", v);
    } else {
      add(name, name == "Temperature" ? "K" : "kJ/mol", v);
    }
  }
  // Under pressure coupling GROMACS then adds the box, its volume, the density, pV (at the reference
  // pressure) and the enthalpy; then its tensors, the surface-tension term and the coupling groups' terms.
  if (mdp.integrator == Integrator::kMd && mdp.pcoupl != Barostat::kNo) {
    double mass = 0;
    for (double m : top.mass) mass += m;
    const double volume = e.box[0] * e.box[1] * e.box[2];
    const double pv = volume * mdp.ref_p / units::kPresFac;
    add("Box-X", "nm", e.box[0]);
    add("Box-Y", "nm", e.box[1]);
    add("Box-Z", "nm", e.box[2]);
    add("Volume", "nm^3", volume);
    add("Density", "kg/m^3", mass * units::kAmu * 1e27 / volume);  // amu / nm^3 in kg / m^3
    add("pV", "kJ/mol", pv);
    add("Enthalpy", "kJ/mol", e.total + pv);
  }
  if (mdp.integrator == Integrator::kMd) {
    const char* axes = "XYZ";
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) add(std::string("Vir-") + axes[a] + axes[b], "kJ/mol", e.virial[a][b]);
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b)
        add(std::string("Pres-") + axes[a] + axes[b], "bar", e.pressure_tensor[a][b]);
    const Mat3& p = e.pressure_tensor;
    add("#Surf*SurfTen", "bar nm", e.box_z * (p[2][2] - 0.5 * (p[0][0] + p[1][1])));
    // The temperature of each coupling group ("rest", every atom, without a thermostat), then under V-rescale
    // each group's scaling factor, as GROMACS.
    if (mdp.tcoupl == Thermostat::kNo || e.group_names.empty()) {
      add(mdp.tcoupl != Thermostat::kNo ? "T-System" : "T-rest", "K", e.temperature);
    } else {
      for (size_t g = 0; g < e.group_names.size(); ++g) add("T-" + e.group_names[g], "K", e.group_temperature[g]);
      for (size_t g = 0; g < e.group_names.size(); ++g) add("Lamb-" + e.group_names[g], "", e.group_lambda[g]);
    }
  }
}

void write_performance(std::ostream& out, double wall_seconds, int threads, double ns_per_day, double hours_per_ns) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%27s%13s%11s\n       Time:%16.3f%13.3f%11.1f\n%27s%13s\nPerformance:%15.3f%13.3f\n", "Core t (s)",
                "Wall t (s)", "(%)", wall_seconds * threads, wall_seconds, 100.0 * threads, "(ns/day)", "(hour/ns)",
                ns_per_day, hours_per_ns);
  out << buf;
}

void write_time_accounting(std::ostream& out, const RunResult& r, int threads) {
  const ForceTimes& ft = r.force_times;
  const int64_t steps = r.steps - r.first_step + 1;  // force evaluations: steps 0..nsteps
  struct Row {
    const char* name;
    int64_t calls;
    double seconds;
    bool domains_only = false;
  };
  const Row rows[] = {
      {"Pair list build", r.pair_list_builds, ft.list_build},
      {"Pair list prune", r.pair_list_prunes, ft.list_prune},
      {"Nonbonded force", steps, ft.nonbonded},
      {"PME mesh", ft.pme > 0 ? steps : 0, ft.pme},
      {"Other forces", steps, ft.other},
      {"Domain decomp.", r.decomposition.rfind("domain", 0) == 0 ? steps : 0, r.decomposition_seconds, true},
      {"Comm. coord./force", ft.communication > 0 ? steps : 0, ft.communication, true},
      {"Update", steps, r.update_seconds},
      {"Constraints", steps, r.constraint_seconds},
      {"Write output", steps, r.output_seconds},
      {"Rest", 0, r.rest_seconds},
  };
  const double total = std::max(r.wall_seconds, 1e-12);
  const char* rule = "-----------------------------------------------------------------\n";
  char buf[160];
  out << "     R E A L   C Y C L E   A N D   T I M E   A C C O U N T I N G\n\n";
  std::snprintf(buf, sizeof buf, " %-20s%8s%12s%14s%10s\n", "Computing:", "Num", "Call", "Wall time", "");
  out << buf;
  std::snprintf(buf, sizeof buf, " %-20s%8s%12s%14s%10s\n", "", "Threads", "Count", "(s)", "%");
  out << buf << rule;
  for (const Row& row : rows) {
    if (row.domains_only && row.calls == 0) continue;  // not a run over domains
    if (row.calls > 0)
      std::snprintf(buf, sizeof buf, " %-20s%8d%12lld%14.3f%10.1f\n", row.name, threads,
                    static_cast<long long>(row.calls), row.seconds, 100 * row.seconds / total);
    else
      std::snprintf(buf, sizeof buf, " %-20s%8s%12s%14.3f%10.1f\n", row.name, "", "", row.seconds,
                    100 * row.seconds / total);
    out << buf;
  }
  out << rule;
  std::snprintf(buf, sizeof buf, " %-20s%8s%12s%14.3f%10.1f\n", "Total", "", "", r.wall_seconds, 100.0);
  out << buf << rule << "\n";
}

}  // namespace qk::md
