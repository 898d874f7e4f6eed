#include "qk/nn/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <vector>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/tensor/ops/view.h"

namespace qk::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host would need byte swaps");

namespace {

// The reference implementation refuses headers above 100 MB; so do we, so a
// corrupt length word cannot make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct Entry {
  std::string name;
  Tensor t;  // contiguous, on the CPU
  uint64_t begin = 0, end = 0;
};

// Orders tensors as the reference writer does: larger element size first
// (so every tensor stays aligned), then by name.
std::vector<Entry> plan_layout(const TensorMap& tensors) {
  std::vector<Entry> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    QK_CHECK(!name.empty() && name != "__metadata__", "save_safetensors: invalid tensor name '",
             name, "'");
    QK_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    safetensors_dtype_name(t.dtype());  // throws for unsupported dtypes
    Tensor c = ops::contiguous(t.device().is_cpu() ? t : ops::to_device(t, kCPU));
    entries.push_back({name, c});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.t.itemsize() > b.t.itemsize();  // std::map already sorted by name
  });
  uint64_t off = 0;
  for (auto& e : entries) {
    e.begin = off;
    off += e.t.nbytes();
    e.end = off;
  }
  return entries;
}

// The 8-byte length word followed by the JSON header, space-padded so the
// data starts at a multiple of 8.
std::string make_header(const std::vector<Entry>& entries, const Metadata& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  for (const auto& e : entries) {
    h[e.name] = {{"dtype", safetensors_dtype_name(e.t.dtype())},
                 {"shape", e.t.shape()},
                 {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = h.dump();
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');
  uint64_t n = json.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

[[noreturn]] void bad_file(const std::string& name, const std::string& what) {
  QK_THROW(IoError, "'", name, "' is not a valid safetensors file: ", what,
           ". Was it fully written? Re-save it, or check that it is a safetensors file");
}

uint64_t checked_u64(const nlohmann::json& v, const std::string& name, const std::string& where) {
  if (!v.is_number_unsigned()) bad_file(name, where + " must be a non-negative integer, got " + v.dump());
  return v.get<uint64_t>();
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  QK_THROW(TypeError, "safetensors: unknown dtype code ", static_cast<int>(t));
}

DType parse_safetensors_dtype(const std::string& s, const std::string& context) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::f32}, {"F64", DType::f64}, {"F16", DType::f16},  {"BF16", DType::bf16},
      {"I32", DType::i32}, {"I64", DType::i64}, {"U8", DType::u8}, {"BOOL", DType::boolean}};
  for (const auto& [n, t] : kNames)
    if (s == n) return t;
  QK_THROW(TypeError, context, ": safetensors dtype '", s,
           "' is not supported (qianka reads F32, F64, F16, BF16, I32, I64, U8, BOOL)");
}

std::string serialize_safetensors(const TensorMap& tensors, const Metadata& metadata) {
  auto entries = plan_layout(tensors);
  std::string out = make_header(entries, metadata);
  for (const auto& e : entries)
    if (e.t.nbytes() > 0) out.append(static_cast<const char*>(e.t.raw_data()), e.t.nbytes());
  return out;
}

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  auto entries = plan_layout(tensors);
  std::string header = make_header(entries, metadata);
  AtomicFileWriter w(path);  // streams tensor by tensor: no second copy of the model
  w.write(header.data(), header.size());
  for (const auto& e : entries)
    if (e.t.nbytes() > 0) w.write(e.t.raw_data(), e.t.nbytes());
  w.commit();
}

SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& name) {
  const auto* bytes = static_cast<const char*>(data);
  if (size < 8) bad_file(name, "it has " + std::to_string(size) + " bytes, fewer than the 8-byte header length");
  uint64_t n;
  std::memcpy(&n, bytes, 8);
  if (n > kMaxHeaderBytes)
    bad_file(name, "the header length word says " + std::to_string(n) + " bytes (limit 100 MB)");
  if (n > size - 8)
    bad_file(name, "the header length word says " + std::to_string(n) + " bytes but only " +
                       std::to_string(size - 8) + " follow (truncated?)");
  if (n < 2 || bytes[8] != '{') bad_file(name, "the header does not start with a JSON object");

  nlohmann::json h;
  try {
    h = nlohmann::json::parse(bytes + 8, bytes + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    bad_file(name, std::string("its JSON header does not parse: ") + e.what());
  }
  if (!h.is_object()) bad_file(name, "its JSON header is not an object");

  const uint64_t data_size = size - 8 - n;
  const char* base = bytes + 8 + n;
  SafetensorsFile out;
  struct Range { uint64_t begin, end; std::string key; };
  std::vector<Range> ranges;
  for (const auto& [key, v] : h.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) bad_file(name, "__metadata__ is not an object of strings");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) bad_file(name, "__metadata__['" + mk + "'] is not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + key + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad_file(name, where + " needs \"dtype\", \"shape\" and \"data_offsets\"");
    if (!v["dtype"].is_string()) bad_file(name, where + ": dtype is not a string");
    DType dt;
    try {
      dt = parse_safetensors_dtype(v["dtype"].get<std::string>(), "'" + name + "' " + where);
    } catch (const TypeError& e) {
      QK_THROW(IoError, e.message());
    }
    const auto& js = v["shape"];
    if (!js.is_array()) bad_file(name, where + ": shape is not an array");
    Shape shape;
    uint64_t numel = 1;
    for (const auto& d : js) {
      uint64_t x = checked_u64(d, name, where + " shape entries");
      if (x != 0 && numel > std::numeric_limits<int64_t>::max() / x)
        bad_file(name, where + ": shape " + js.dump() + " overflows");
      numel *= x;
      shape.push_back(static_cast<int64_t>(x));
    }
    const auto& jo = v["data_offsets"];
    if (!jo.is_array() || jo.size() != 2) bad_file(name, where + ": data_offsets is not [begin, end]");
    uint64_t b = checked_u64(jo[0], name, where + " data_offsets"),
             e = checked_u64(jo[1], name, where + " data_offsets");
    if (b > e || e > data_size)
      bad_file(name, where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                         "] out of the data section's " + std::to_string(data_size) + " bytes (truncated?)");
    // Every element takes at least a byte: this bound keeps the product below from overflowing.
    if (numel > data_size)
      bad_file(name, where + ": shape " + shape_str(shape) + " needs more bytes than the file holds");
    const uint64_t want = numel * dtype_size(dt);
    if (e - b != want)
      bad_file(name, where + ": " + std::to_string(e - b) + " bytes for shape " + shape_str(shape) +
                         " of " + dtype_name(dt) + ", which needs " + std::to_string(want));
    Tensor t = empty(shape, dt);
    if (want > 0) std::memcpy(t.raw_data(), base + b, want);
    out.tensors.emplace(key, std::move(t));
    ranges.push_back({b, e, key});
  }
  // The reference reader requires the tensors to tile the data section
  // exactly: no overlap (two tensors aliasing bytes) and no hole.
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  uint64_t pos = 0;
  for (const auto& r : ranges) {
    if (r.begin < pos) bad_file(name, "tensor '" + r.key + "' overlaps the tensor before it");
    if (r.begin > pos)
      bad_file(name, "a hole of " + std::to_string(r.begin - pos) + " bytes precedes tensor '" + r.key + "'");
    pos = r.end;
  }
  if (pos != data_size)
    bad_file(name, std::to_string(data_size - pos) + " bytes follow the last tensor");
  return out;
}

SafetensorsFile load_safetensors(const std::string& path) {
  MappedFile f(path);
  return parse_safetensors(f.data(), f.size(), path);
}

}  // namespace qk::nn
