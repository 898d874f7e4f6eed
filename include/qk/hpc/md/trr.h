// GROMACS's full-precision trajectory (.trr), as mdrun writes it for
// nstxout / nstvout / nstfout, readable by gmx check, trjconv, VMD, MDAnalysis:
//
//   qk::md::TrrWriter traj("traj.trr", /*double_precision=*/false);
//   qk::md::TrrFrame fr;  fr.step = 10;  fr.time = 0.02;  fr.box = ...;  fr.x = x;
//   traj.write(fr);                                       // any of x, v, f may be empty
//   std::vector<qk::md::TrrFrame> frames = qk::md::read_trr("traj.trr");
//
// Each frame is XDR (big-endian): magic 1993, the string "GMX_trn_file", the
// byte sizes of the blocks present (box, positions, velocities, forces; the
// others zero), the atom count, step, nre (0), time and lambda, then the
// blocks. Reals are float, or double in a double-precision run (gmx_d), which
// a reader tells from the sizes. Lengths nm, velocities nm/ps, forces
// kJ mol^-1 nm^-1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qk/hpc/md/output_file.h"
#include "qk/hpc/md/units.h"

namespace qk::md {

struct TrrFrame {
  int64_t step = 0;
  double time = 0, lambda = 0;  // ps
  Mat3 box{};                   // rows are the box vectors, nm
  int natoms = 0;               // set by read_trr; write() takes it from x, v or f
  std::vector<Vec3> x, v, f;    // each empty or one per atom
  bool double_precision = false;  // how read_trr found it stored
};

class TrrWriter {
 public:
  // Creates (truncates) path; with keep_bytes (a resumed run) keeps the file's first keep_bytes bytes, the
  // frames written before the checkpoint, and appends after them.
  TrrWriter(const std::string& path, bool double_precision, std::optional<uint64_t> keep_bytes = std::nullopt);
  uint64_t bytes() const { return file_.bytes(); }  // the file's size after the last write
  void write(const TrrFrame& frame);
  const std::string& path() const { return file_.path(); }

 private:
  bool double_;
  OutputFile file_;
};

// Every frame of a .trr; malformed or truncated files are errors naming the frame and byte offset.
std::vector<TrrFrame> read_trr(const std::string& path);

}  // namespace qk::md
