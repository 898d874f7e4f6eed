// GROMACS's long-range dispersion correction (DispCorr = Ener / EnerPres) for
// LJ with the potential-shift modifier (mdlib/dispersioncorrection.cpp):
//
//   <C6>   = the average C6 over all atom pairs but the excluded ones
//   E      = <C6> (N/2) (rho * enerdiff - enershift),   rho = N / V
//   enershift = -1/rc^6   (the shift, which also counted each atom with itself)
//   enerdiff  = 4 pi/3 rc^3 * enershift - 4 pi / (3 rc^3)   (inside + beyond rc)
//   virial    = (N/2) rho <C6> (4 pi / rc^3) / 3 on each diagonal element (EnerPres)
//   Pres. DC  = -2 virial / V (in bar)
//
// GROMACS rounds rc to its table spacing first; for the cut-offs people use
// (multiples of 0.002 nm) that changes nothing.
#pragma once

#include "pbc.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

class DispersionCorrection {
 public:
  DispersionCorrection(const Topology& top, DispCorr kind, double rvdw);
  struct Result {
    double energy = 0, pressure = 0;  // kJ/mol, bar
    double virial = 0;                // added to each diagonal element
  };
  Result compute(double volume) const;
  double average_c6() const { return avg_c6_; }

 private:
  DispCorr kind_;
  int natoms_;
  double avg_c6_ = 0, enershift6_ = 0, enerdiff6_ = 0, virdiff6_ = 0;
};

}  // namespace qk::md
