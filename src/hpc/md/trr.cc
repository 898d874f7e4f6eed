// The .trr format (GROMACS's trrio.cpp, gmx_fio_xdr.cpp): see trr.h.
#include "qk/hpc/md/trr.h"

#include <limits>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "xdr.h"

namespace qk::md {
namespace {

constexpr int32_t kTrrMagic = 1993;
constexpr char kVersion[] = "GMX_trn_file";

}  // namespace

TrrWriter::TrrWriter(const std::string& path, bool double_precision, std::optional<uint64_t> keep_bytes)
    : double_(double_precision), file_(path, keep_bytes) {}

void TrrWriter::write(const TrrFrame& fr) {
  const size_t n = !fr.x.empty() ? fr.x.size() : !fr.v.empty() ? fr.v.size() : fr.f.size();
  for (const std::vector<Vec3>* a : {&fr.x, &fr.v, &fr.f})
    QK_CHECK(a->empty() || a->size() == n, path(), ": a frame's positions, velocities and forces must have the same "
             "atom count (", fr.x.size(), ", ", fr.v.size(), ", ", fr.f.size(), ")");
  QK_CHECK(n <= static_cast<size_t>(std::numeric_limits<int32_t>::max() / 24), path(), ": ", n,
           " atoms are more than a .trr frame holds");
  QK_CHECK(fr.step >= std::numeric_limits<int32_t>::min() && fr.step <= std::numeric_limits<int32_t>::max(), path(),
           ": step ", fr.step, " does not fit the .trr header's 32-bit step");
  const int32_t real = double_ ? 8 : 4, vec = static_cast<int32_t>(3 * real * n);
  XdrOut o;
  o.i32(kTrrMagic);
  o.string(kVersion);
  o.i32(0);              // ir_size
  o.i32(0);              // e_size
  o.i32(9 * real);       // box_size
  o.i32(0);              // vir_size
  o.i32(0);              // pres_size
  o.i32(0);              // top_size
  o.i32(0);              // sym_size
  o.i32(fr.x.empty() ? 0 : vec);
  o.i32(fr.v.empty() ? 0 : vec);
  o.i32(fr.f.empty() ? 0 : vec);
  o.i32(static_cast<int32_t>(n));
  o.i32(static_cast<int32_t>(fr.step));
  o.i32(0);  // nre
  o.real(fr.time, double_);
  o.real(fr.lambda, double_);
  for (const Vec3& row : fr.box)
    for (double c : row) o.real(c, double_);
  for (const std::vector<Vec3>* a : {&fr.x, &fr.v, &fr.f})
    for (const Vec3& p : *a)
      for (double c : p) o.real(c, double_);
  file_.write(o.bytes());
}

std::vector<TrrFrame> read_trr(const std::string& path) {
  const std::string data = read_file(path);
  XdrIn in(data, path);
  std::vector<TrrFrame> frames;
  read_frames(in, path, ".trr", [&](size_t start) {
    auto where = [&] { return path + ": frame " + std::to_string(frames.size()) + " at byte " + std::to_string(start); };
    QK_CHECK(in.i32("the magic number") == kTrrMagic, where(), ": not a .trr frame (magic number is not 1993)");
    const std::string version = in.string("the version string");
    QK_CHECK(version == kVersion, where(), ": version '", version, "', expected '", kVersion, "'");
    int32_t size[10];  // ir e box vir pres top sym x v f
    for (int32_t& s : size) s = in.i32("the block sizes");
    const int32_t natoms = in.i32("the atom count");
    QK_CHECK(natoms >= 0, where(), ": negative atom count ", natoms);
    // Real size from the first nonzero block (GROMACS's nFloatSize).
    int32_t real = 0;
    if (size[2]) real = size[2] / 9;
    else if (size[3]) real = size[3] / 9;
    else if (size[4]) real = size[4] / 9;
    else if (natoms > 0 && size[7]) real = size[7] / (3 * natoms);
    else if (natoms > 0 && size[8]) real = size[8] / (3 * natoms);
    else if (natoms > 0 && size[9]) real = size[9] / (3 * natoms);
    else real = 4;
    QK_CHECK(real == 4 || real == 8, where(), ": block sizes give ", real, "-byte reals (4 or 8 expected)");
    QK_CHECK(size[0] == 0 && size[1] == 0 && size[5] == 0 && size[6] == 0, where(),
             ": holds input-record, energy, topology or symmetry blocks, which qk md does not read");
    const bool dbl = real == 8;
    TrrFrame fr;
    fr.natoms = natoms;
    fr.double_precision = dbl;
    fr.step = in.i32("the step");
    in.i32("nre");
    fr.time = in.real(dbl, "the time");
    fr.lambda = in.real(dbl, "lambda");
    auto matrix = [&](int32_t bytes, Mat3* m, const char* what) {
      if (bytes == 0) return;
      QK_CHECK(bytes == 9 * real, where(), ": ", what, " block of ", bytes, " bytes");
      for (Vec3& row : *m)
        for (double& c : row) c = in.real(dbl, what);
    };
    Mat3 unused{};
    matrix(size[2], &fr.box, "box");
    matrix(size[3], &unused, "virial");
    matrix(size[4], &unused, "pressure");
    std::vector<Vec3>* arrays[3] = {&fr.x, &fr.v, &fr.f};
    const char* names[3] = {"positions", "velocities", "forces"};
    for (int k = 0; k < 3; ++k) {
      if (size[7 + k] == 0) continue;
      QK_CHECK(static_cast<int64_t>(size[7 + k]) == static_cast<int64_t>(3) * real * natoms, where(), ": ", names[k],
               " block of ", size[7 + k], " bytes for ", natoms, " atoms");
      arrays[k]->resize(natoms);
      for (Vec3& p : *arrays[k])
        for (double& c : p) c = in.real(dbl, names[k]);
    }
    frames.push_back(std::move(fr));
  });
  return frames;
}

}  // namespace qk::md
