// GROMACS's units and physical constants (GROMACS 2022 units.h, CODATA 2018):
// lengths in nm, time in ps, mass in u, energy in kJ/mol, charge in e,
// temperature in K, pressure in bar. Deriving them the way GROMACS does keeps
// our energies equal to its to the last digit rather than to 1e-6.
#pragma once

#include <array>
#include <cmath>

namespace qk::md {

using Vec3 = std::array<double, 3>;
using Mat3 = std::array<Vec3, 3>;  // row-major 3x3 tensor (virial, kinetic energy, pressure)

namespace units {
inline constexpr double kAvogadro = 6.02214076e23;     // 1/mol
inline constexpr double kBoltzmannSi = 1.380649e-23;   // J/K
inline constexpr double kElementaryCharge = 1.602176634e-19;  // C
inline constexpr double kEpsilon0Si = 8.8541878128e-12;       // F/m
inline constexpr double kAmu = 1.66053906660e-27;             // kg
inline constexpr double kPi = 3.14159265358979323846;

// Boltzmann's constant in kJ/(mol K) (GROMACS's BOLTZ).
inline constexpr double kBoltz = kBoltzmannSi * kAvogadro / 1000.0;
// 1/(4 pi eps0) in kJ mol^-1 nm e^-2 (GROMACS's ONE_4PI_EPS0, ~138.935).
inline constexpr double kEpsilon0 = kEpsilon0Si * 1e-9 * 1e3 / (kElementaryCharge * kElementaryCharge * kAvogadro);
inline constexpr double kCoulombFactor = 1.0 / (4.0 * kPi * kEpsilon0);
// Bar per kJ mol^-1 nm^-3 (GROMACS's PRESFAC, ~16.6054).
inline constexpr double kPresFac = 1.0 / (1e5 * 1e-9 * 1e-12 * 1e-12 / kAmu);
}  // namespace units

}  // namespace qk::md
