// The .edr format (GROMACS's enxio.cpp, file version 5): see edr.h.
#include "qk/hpc/md/edr.h"

#include <utility>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "xdr.h"

namespace qk::md {
namespace {

constexpr int32_t kNamesMagic = -55555, kFrameMagic = -7777777, kEnxVersion = 5;
constexpr float kEnxFirstReal = -2e10f;  // the old format began with the time: a frame starts below -1e10

void xdr_string(XdrOut* o, const std::string& s) {  // xdr_string: length, bytes padded to 4 (no terminator)
  o->i32(static_cast<int32_t>(s.size()));
  o->opaque(s.data(), s.size());
}

void i64(XdrOut* o, int64_t v) {  // GROMACS's xdr_int64: high word, then low
  o->i32(static_cast<int32_t>(static_cast<uint64_t>(v) >> 32));
  o->u32(static_cast<uint32_t>(v));
}

int64_t i64(XdrIn& in, const char* what) {
  const uint64_t hi = in.u32(what), lo = in.u32(what);
  return static_cast<int64_t>(hi << 32 | lo);
}

}  // namespace

EdrWriter::EdrWriter(const std::string& path, std::vector<EdrTerm> terms, bool double_precision,
                     std::optional<uint64_t> keep_bytes)
    : terms_(std::move(terms)), double_(double_precision), file_(path, keep_bytes) {
  if (keep_bytes) return;  // the names are in the kept part
  XdrOut o;
  o.i32(kNamesMagic);
  o.i32(kEnxVersion);
  o.i32(static_cast<int32_t>(terms_.size()));
  for (const EdrTerm& t : terms_) {
    xdr_string(&o, t.name);
    xdr_string(&o, t.unit);
  }
  file_.write(o.bytes());
}

void EdrSums::add(const std::vector<double>& e) {
  if (esum_run.empty()) esum_run.assign(e.size(), 0.0);
  QK_CHECK(esum_run.size() == e.size(), "EdrSums: ", e.size(), " values after ", esum_run.size());
  if (nsum == 0) {
    esum = e;
    eav.assign(e.size(), 0.0);
  } else {  // the deviations first, then the sum (Welford's update, as GROMACS)
    const double m = static_cast<double>(nsum), invmm = (1.0 / m) / (m + 1.0);
    for (size_t i = 0; i < e.size(); ++i) {
      const double diff = esum[i] - m * e[i];
      eav[i] += diff * diff * invmm;
      esum[i] += e[i];
    }
  }
  for (size_t i = 0; i < e.size(); ++i) esum_run[i] += e[i];
  ++nsum;
  ++nsum_run;
}

void EdrSums::take(EdrFrame* frame) {
  frame->nsum = nsum;
  frame->esum = nsum > 0 ? esum : std::vector<double>{};
  frame->eav = nsum > 0 ? eav : std::vector<double>{};
  nsum = 0;
}

void EdrWriter::write(const EdrFrame& fr) {
  QK_CHECK(fr.values.size() == terms_.size(), path(), ": a frame of ", fr.values.size(), " values for ",
           terms_.size(), " terms");
  QK_CHECK(fr.nsum <= 1 || (fr.esum.size() == terms_.size() && fr.eav.size() == terms_.size()), path(),
           ": a frame summing ", fr.nsum, " steps needs a sum and a deviation per term");
  const int32_t real = double_ ? 8 : 4;
  XdrOut o;
  o.real(kEnxFirstReal, double_);
  o.i32(kFrameMagic);
  o.i32(kEnxVersion);
  o.real(fr.time, /*dbl=*/true);
  i64(&o, fr.step);
  const bool sums = fr.nsum > 1;  // as GROMACS: a sum of one step adds nothing to the value, so none is stored
  o.i32(sums ? static_cast<int32_t>(fr.nsum) : 0);
  i64(&o, fr.nsteps);
  o.real(fr.dt, /*dbl=*/true);
  o.i32(static_cast<int32_t>(terms_.size()));
  o.i32(0);  // reserved
  o.i32(0);  // blocks
  o.i32(static_cast<int32_t>(terms_.size()) * real * 4);  // e_size: GROMACS's sizeof(energy) = 4 reals
  o.i32(0);  // reserved
  o.i32(0);  // the old format's dummy
  for (size_t k = 0; k < fr.values.size(); ++k) {
    o.real(fr.values[k], double_);
    if (sums) {
      o.real(fr.eav[k], double_);
      o.real(fr.esum[k], double_);
    }
  }
  file_.write(o.bytes());
}

EdrFile read_edr(const std::string& path) {
  const std::string data = read_file(path);
  XdrIn in(data, path);
  EdrFile f;
  QK_CHECK(in.i32("the names' magic number") == kNamesMagic, path,
           ": not a GROMACS energy file of version 2 or later (its names' magic number is not -55555)");
  const int32_t version = in.i32("the file version");
  QK_CHECK(version >= 4 && version <= kEnxVersion, path, ": energy file version ", version, " (4 and 5 are read)");
  const int32_t nre = in.i32("the term count");
  QK_CHECK(nre >= 0, path, ": negative term count ", nre);
  for (int32_t k = 0; k < nre; ++k) {
    EdrTerm t;
    t.name = in.opaque(static_cast<size_t>(in.i32("a term's name")), "a term's name");
    t.unit = in.opaque(static_cast<size_t>(in.i32("a term's unit")), "a term's unit");
    f.terms.push_back(std::move(t));
  }
  // The precision: the first frame's marker is -2e10 as a float or as a double.
  if (!in.done()) {
    XdrIn probe(data, path);
    while (probe.pos() < in.pos()) probe.u32("the names");
    f.double_precision = probe.f32("the first frame") != kEnxFirstReal;
  }
  const bool dbl = f.double_precision;
  read_frames(in, path, ".edr", [&](size_t start) {
    const std::string where = path + ": frame " + std::to_string(f.frames.size()) + " at byte " + std::to_string(start);
    QK_CHECK(static_cast<float>(in.real(dbl, "the frame marker")) == kEnxFirstReal, where, ": no frame marker");
    QK_CHECK(in.i32("the frame magic") == kFrameMagic, where, ": not an energy frame");
    in.i32("the version");
    EdrFrame fr;
    fr.time = in.real(true, "the time");
    fr.step = i64(in, "the step");
    const int32_t nsum = in.i32("the sum length");
    QK_CHECK(nsum >= 0, where, ": negative sum length ", nsum);
    fr.nsum = nsum;
    fr.nsteps = i64(in, "the steps");
    fr.dt = in.real(true, "dt");
    const int32_t n = in.i32("the term count");
    QK_CHECK(n == nre, where, ": ", n, " values for ", nre, " terms");
    in.i32("reserved");
    const int32_t nblock = in.i32("the block count");
    QK_CHECK(nblock >= 0, where, ": negative block count");
    std::vector<std::vector<std::pair<int32_t, int32_t>>> blocks(nblock);  // per block: (type, count) per sub
    for (auto& b : blocks) {
      in.i32("a block id");
      const int32_t nsub = in.i32("a block's subblocks");
      QK_CHECK(nsub >= 0, where, ": negative subblock count");
      for (int32_t s = 0; s < nsub; ++s) {
        const int32_t type = in.i32("a subblock type");
        b.emplace_back(type, in.i32("a subblock size"));
      }
    }
    in.i32("e_size");
    in.i32("reserved");
    in.i32("dummy");
    for (int32_t k = 0; k < n; ++k) {
      fr.values.push_back(in.real(dbl, "an energy"));
      if (nsum > 0) {  // the squared deviations and the sum over the frame's steps
        fr.eav.push_back(in.real(dbl, "a deviation sum"));
        fr.esum.push_back(in.real(dbl, "a sum"));
      }
    }
    // Extra blocks (free energy, restraints): skipped. Types: 0 int, 1 float, 2 double, 3 int64, 4 char, 5 string.
    for (const auto& b : blocks)
      for (auto [type, count] : b)
        for (int32_t i = 0; i < count; ++i) {
          switch (type) {
            case 0: in.i32("block data"); break;
            case 1: in.f32("block data"); break;
            case 2: in.real(true, "block data"); break;
            case 3: i64(in, "block data"); break;
            case 4: in.u32("block data"); break;  // xdr_u_char: 4 bytes
            case 5: in.string("block data"); break;
            default: QK_THROW(ValueError, where, ": unknown block data type ", type);
          }
        }
    f.frames.push_back(std::move(fr));
  });
  return f;
}

}  // namespace qk::md
