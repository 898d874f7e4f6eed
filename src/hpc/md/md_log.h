// md.log text as GROMACS's mdrun writes it: the step header, the energy block
// (names %15s over values %15.5e, five a row, the terms this run has in
// GROMACS's order) and the Performance lines.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "qk/hpc/md/edr.h"
#include "qk/hpc/md/md.h"

namespace qk::md {

// The (name, value) pairs GROMACS would print for this frame.
std::vector<std::pair<std::string, double>> energy_terms(const EnergyFrame& e, const Topology& top,
                                                         const MdpOptions& mdp);
void write_energy_block(std::ostream& out, const EnergyFrame& e, const Topology& top, const MdpOptions& mdp);
// The .edr's terms and values for this frame (edr.h): md.log's, named as GROMACS's .edr names them
// ("Pressure", unit bar, where the log says "Pressure (bar)"), then as GROMACS the virial and pressure
// tensors (Vir-XX .. Vir-ZZ, Pres-XX .. Pres-ZZ), #Surf*SurfTen and the coupling group's temperature.
void edr_terms(const EnergyFrame& e, const Topology& top, const MdpOptions& mdp, std::vector<EdrTerm>* terms,
               std::vector<double>* values);
// mdrun's closing "A V E R A G E S" section: "Statistics over <steps> steps using <frames> frames", then
// the averages over every energy-computing step of the run (`sums`, of the .edr's `terms`): md.log's
// energy terms, the total virial and the pressure tensor.
void write_averages(std::ostream& out, const std::vector<EdrTerm>& terms, const EdrSums& sums, int64_t steps,
                    const Topology& top, const MdpOptions& mdp);
// mdrun's Performance lines; `threads`: the cores the run used (threads on every rank).
void write_performance(std::ostream& out, double wall_seconds, int threads, double ns_per_day, double hours_per_ns);
// mdrun's "R E A L   C Y C L E   A N D   T I M E   A C C O U N T I N G" table: per part of the run, the
// threads, how often it ran, its wall seconds and its share of the run.
void write_time_accounting(std::ostream& out, const RunResult& r, int threads);

}  // namespace qk::md
