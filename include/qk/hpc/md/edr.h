// GROMACS's energy file (.edr), as mdrun writes it every nstenergy steps and
// `gmx energy` reads it:
//
//   qk::md::EdrWriter edr("ener.edr", {{"Potential", "kJ/mol"}, {"Temperature", "K"}}, false);
//   edr.write(step, time, dt, nsteps_since_last_frame, {epot, temperature});
//   qk::md::EdrFile f = qk::md::read_edr("ener.edr");   // f.terms, f.frames[k].values
//
// Layout (XDR, enxio version 5): once, magic -55555, the version, the number
// of terms and each term's name and unit; per frame, a marker real (-2e10),
// magic -7777777, the version, time (double), step (int64), the number of
// summed steps (nsum), the steps since the previous frame (int64), dt
// (double), the term count, no extra blocks, and per term one real (float,
// or double for a double-precision run), followed when nsum > 0 by the sum
// of squared deviations and the sum over the summed steps.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qk/hpc/md/output_file.h"

namespace qk::md {

struct EdrTerm {
  std::string name, unit;
  bool operator==(const EdrTerm&) const = default;
};

struct EdrFrame {
  int64_t step = 0;
  double time = 0, dt = 0;  // ps
  int64_t nsteps = 0;       // steps since the previous frame
  std::vector<double> values;  // one per term
  // GROMACS's exact sums over the energy steps since the previous frame (nstcalcenergy apart; 0: none):
  // per term the sum and the sum of squared deviations from the mean, so gmx energy averages every
  // computed step, not only the frames.
  int64_t nsum = 0;
  std::vector<double> esum, eav;
};

struct EdrFile {
  std::vector<EdrTerm> terms;
  std::vector<EdrFrame> frames;
  bool double_precision = false;
};

// GROMACS's running energy sums (ebin.cpp add_ebin): each energy-computing step's values added to the sums
// since the last frame (the frame's esum and eav, then reset) and to the whole run's (md.log's averages).
struct EdrSums {
  int64_t nsum = 0;
  std::vector<double> esum, eav;
  int64_t nsum_run = 0;
  std::vector<double> esum_run;

  void add(const std::vector<double>& values);
  // Moves the sums since the last frame into `frame` and starts them again.
  void take(EdrFrame* frame);
};

class EdrWriter {
 public:
  // Creates (truncates) path and writes the term names; with keep_bytes (a resumed run) keeps the file's
  // first keep_bytes bytes, names and frames before the checkpoint, and appends after them.
  EdrWriter(const std::string& path, std::vector<EdrTerm> terms, bool double_precision,
            std::optional<uint64_t> keep_bytes = std::nullopt);
  void write(const EdrFrame& frame);
  uint64_t bytes() const { return file_.bytes(); }
  const std::string& path() const { return file_.path(); }

 private:
  std::vector<EdrTerm> terms_;
  bool double_;
  OutputFile file_;
};

// The terms and every frame with its sums; files GROMACS wrote with extra blocks are read too (the blocks
// skipped). Malformed or truncated files are errors naming the frame and byte.
EdrFile read_edr(const std::string& path);

}  // namespace qk::md
