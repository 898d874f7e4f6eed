// The tuning file (qk/qccl/tune.h): JSON, one entry per count of ranks on the
// host, written by `qk perf --tune` and read at communicator init.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/host_info.h"
#include "qk/base/timer.h"
#include "qk/qccl/tune.h"

namespace qk::qccl {

namespace {

using json = nlohmann::json;
constexpr const char* kFormat = "qccl-tune 1";

struct Knob {
  const char* name;
  size_t TunedSizes::*field;
  SizeBounds bounds;
};
const Knob kKnobs[] = {{"shm_slice", &TunedSizes::shm_slice, {4 << 10, 16 << 20}},
                       {"reduce_slice", &TunedSizes::reduce_slice, {4 << 10, 16 << 20}},
                       {"chain_chunk", &TunedSizes::chain_chunk, {4 << 10, 256 << 20}},
                       {"cma_copy_chunk", &TunedSizes::cma_copy_chunk, {64 << 10, size_t(1) << 30}}};

const Knob& knob(const std::string& name) {
  for (const Knob& k : kKnobs)
    if (name == k.name) return k;
  QK_THROW(ValueError, "no tuned size called '", name,
           "' (expected shm_slice, reduce_slice, chain_chunk or cma_copy_chunk)");
}

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  QK_THROW(ValueError, "qccl tuning file ", path, ": ", what);
}

}  // namespace

SizeBounds tune_bounds(const std::string& name) { return knob(name).bounds; }

TuneFile read_tune_file(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const Error& e) {
    QK_THROW(IoError, "qccl tuning file ", path, ": ", e.message());
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad_file(path, std::string("not JSON: ") + e.what());
  }
  if (!j.is_object() || j.value("format", std::string()) != kFormat)
    bad_file(path, std::string("not a qccl tuning file (expected \"format\": \"") + kFormat + "\")");
  TuneFile f;
  try {
    const json& m = j.at("machine");
    f.cpu = m.at("cpu").get<std::string>();
    f.cpus = m.at("cpus").get<int>();
    f.written = j.value("written", std::string());
    for (const json& e : j.at("entries")) {
      TuneEntry t;
      t.ranks_on_host = e.at("ranks_on_host").get<int>();
      if (t.ranks_on_host < 1) bad_file(path, "an entry has ranks_on_host " + std::to_string(t.ranks_on_host));
      for (const Knob& k : kKnobs) {
        int64_t v = e.at(k.name).get<int64_t>();
        if (v < static_cast<int64_t>(k.bounds.lo) || v > static_cast<int64_t>(k.bounds.hi))
          bad_file(path, fmt::format("{} {} for {} ranks is outside [{}, {}]", k.name, v, t.ranks_on_host,
                                k.bounds.lo, k.bounds.hi));
        t.sizes.*k.field = static_cast<size_t>(v);
      }
      t.seconds = e.value("seconds", 0.0);
      if (e.contains("trials"))
        for (const json& tr : e.at("trials"))
          t.trials.push_back({tr.at("knob").get<std::string>(), tr.at("value").get<size_t>(),
                              tr.at("relative_time").get<double>()});
      f.entries.push_back(std::move(t));
    }
  } catch (const json::exception& e) {
    bad_file(path, std::string("missing or mistyped field: ") + e.what());
  }
  return f;
}

void write_tune_file(const std::string& path, const TuneFile& f) {
  json j;
  j["format"] = kFormat;
  j["written"] = f.written;
  j["machine"] = {{"cpu", f.cpu}, {"cpus", f.cpus}};
  j["entries"] = json::array();
  for (const TuneEntry& t : f.entries) {
    json e;
    e["ranks_on_host"] = t.ranks_on_host;
    for (const Knob& k : kKnobs) e[k.name] = t.sizes.*k.field;
    e["seconds"] = t.seconds;
    e["trials"] = json::array();
    for (const TuneTrial& tr : t.trials)
      e["trials"].push_back({{"knob", tr.knob}, {"value", tr.value}, {"relative_time", tr.relative_time}});
    j["entries"].push_back(std::move(e));
  }
  atomic_write_file(path, j.dump(2) + "\n");
}

TuneFile tune_file_for_this_machine() {
  TuneFile f;
  f.cpu = cpu_model_name();
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  f.cpus = cpus > 0 ? static_cast<int>(cpus) : 0;
  f.written = timestamp(TimestampFormat::utc);
  return f;
}

TuneFile tune_file_to_extend(const std::string& path, bool* replaced) {
  if (replaced) *replaced = false;
  TuneFile fresh = tune_file_for_this_machine();
  if (!file_exists(path)) return fresh;
  TuneFile f;
  try {
    f = read_tune_file(path);
  } catch (const Error& e) {
    QK_THROW(ValueError, path, " exists and is not a tuning file to add to: ", e.message(),
             ". Remove it or choose another file");
  }
  if (f.cpu != fresh.cpu) {
    if (replaced) *replaced = true;
    return fresh;
  }
  f.written = fresh.written;
  f.cpus = fresh.cpus;
  return f;
}

void add_to_tune_file(const std::string& path, const TuneEntry& entry) {
  TuneFile f = tune_file_to_extend(path);
  merge_entry(f, entry);
  write_tune_file(path, f);
}

void merge_entry(TuneFile& f, const TuneEntry& entry) {
  std::erase_if(f.entries, [&](const TuneEntry& e) { return e.ranks_on_host == entry.ranks_on_host; });
  f.entries.push_back(entry);
  std::sort(f.entries.begin(), f.entries.end(),
            [](const TuneEntry& a, const TuneEntry& b) { return a.ranks_on_host < b.ranks_on_host; });
}

const TuneEntry* nearest_entry(const TuneFile& f, int ranks) {
  const TuneEntry* best = nullptr;
  for (const TuneEntry& e : f.entries) {
    if (!best) {
      best = &e;
      continue;
    }
    int d = std::abs(e.ranks_on_host - ranks), bd = std::abs(best->ranks_on_host - ranks);
    if (d < bd || (d == bd && e.ranks_on_host < best->ranks_on_host)) best = &e;
  }
  return best;
}

}  // namespace qk::qccl
