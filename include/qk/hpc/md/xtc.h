// GROMACS's compressed trajectory (.xtc), as mdrun writes it for
// nstxout-compressed: positions only, rounded to 1/precision nm (default
// 1000: 0.001 nm) and packed with the xdr3dfcoord scheme (integers relative
// to the frame's minimum, mixed-radix packing of each atom's three
// coordinates, short runs of small differences between neighbouring atoms,
// the first two atoms of a water swapped), so the byte stream equals
// GROMACS's for the same positions.
//
//   qk::md::XtcWriter xtc("traj_comp.xtc");            // precision 1000
//   qk::md::XtcFrame fr;  fr.step = 10;  fr.time = 0.02;  fr.box = ...;  fr.x = x;
//   xtc.write(fr);
//   std::vector<qk::md::XtcFrame> frames = qk::md::read_xtc("traj_comp.xtc");
//
// Per frame (XDR, big-endian): magic 1995, atom count, step, time (float), the
// box (9 floats), then the coordinates (frames of 9 atoms or fewer as plain
// floats).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qk/hpc/md/output_file.h"
#include "qk/hpc/md/units.h"

namespace qk::md {

struct XtcFrame {
  int64_t step = 0;
  double time = 0;  // ps
  Mat3 box{};       // rows are the box vectors, nm
  float precision = 1000;  // what read_xtc found (write uses the writer's)
  std::vector<Vec3> x;
};

class XtcWriter {
 public:
  // Creates (truncates) path; precision > 0 (GROMACS's compressed-x-precision). With keep_bytes (a
  // resumed run) keeps the file's first keep_bytes bytes and appends after them.
  explicit XtcWriter(const std::string& path, float precision = 1000,
                     std::optional<uint64_t> keep_bytes = std::nullopt);
  uint64_t bytes() const { return file_.bytes(); }  // the file's size after the last write
  void write(const XtcFrame& frame);
  const std::string& path() const { return file_.path(); }

 private:
  float precision_;
  OutputFile file_;
};

// The frame's bytes as XtcWriter writes them (for tests and tools).
std::string encode_xtc_frame(const XtcFrame& frame, float precision);

// Every frame of an .xtc; malformed or truncated files are errors naming the frame and byte offset.
std::vector<XtcFrame> read_xtc(const std::string& path);

}  // namespace qk::md
