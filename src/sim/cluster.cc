// Cluster files: parsing with errors that name the field, writing, the
// presets embedded at build time (share/sim/clusters/*.json), and `local`.
#include "qk/sim/cluster.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "presets.h"
#include "stream_kinds.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace qk::sim {

namespace {

QK_ENV_STRING(env_calibration, "QK_SIM_CALIBRATION", "",
              "qk sim: the calibration file `qk sim calibrate` writes and the cluster `local` reads "
              "(default: $XDG_CACHE_HOME/qianka/sim-local.json).");
QK_ENV_STRING(env_xdg_cache, "XDG_CACHE_HOME", "", "Base folder for caches (qk sim's calibration file).");
QK_ENV_STRING(env_home, "HOME", "", "The user's home folder (default cache location).");

using json = nlohmann::ordered_json;  // files keep their fields in the order written

// Reads one JSON object, naming each field by its path in errors and
// refusing fields it does not know (a misspelt field would otherwise be a
// silent default).
class Fields {
 public:
  Fields(const json& j, std::string path, const std::string& origin) : j_(j), path_(std::move(path)), origin_(origin) {
    if (!j_.is_object()) fail("", "expected an object, got " + std::string(j_.type_name()));
  }

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    QK_THROW(ValueError, "cluster file ", origin_, ": ", name(key), ": ", why);
  }
  std::string name(const std::string& key) const {
    if (path_.empty()) return key.empty() ? "(top level)" : key;
    return key.empty() ? path_ : path_ + "." + key;
  }
  bool has(const std::string& key) {
    seen_.insert(key);
    return j_.contains(key) && !j_.at(key).is_null();
  }
  const json& at(const std::string& key) {
    if (!has(key)) fail(key, "missing");
    return j_.at(key);
  }
  Fields object(const std::string& key) { return Fields(at(key), name(key), origin_); }
  double number(const std::string& key, double lo, bool lo_open, double hi = INFINITY) {
    const json& v = at(key);
    if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
    const double x = v.get<double>();
    if (!std::isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi)
      fail(key, "expected a number " + std::string(lo_open ? "> " : ">= ") + fmt(lo) +
                    (std::isinf(hi) ? "" : " and <= " + fmt(hi)) + ", got " + v.dump());
    return x;
  }
  double number_or(const std::string& key, double def, double lo, bool lo_open, double hi = INFINITY) {
    return has(key) ? number(key, lo, lo_open, hi) : def;
  }
  int64_t integer(const std::string& key, int64_t lo) {
    const json& v = at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo)
      fail(key, "expected an integer >= " + std::to_string(lo) + ", got " + v.dump());
    return v.get<int64_t>();
  }
  int64_t integer_or(const std::string& key, int64_t def, int64_t lo) { return has(key) ? integer(key, lo) : def; }
  std::string string(const std::string& key) {
    const json& v = at(key);
    if (!v.is_string()) fail(key, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  std::string string_or(const std::string& key, const std::string& def) { return has(key) ? string(key) : def; }
  // Every field of the object must have been looked at.
  void done() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) {
        std::string known;
        for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
        fail(it.key(), "unknown field (" + (path_.empty() ? std::string("the top level") : path_) + " has " + known +
                           ")");
      }
  }

 private:
  static std::string fmt(double x) {
    std::string s = std::to_string(x);
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  const json& j_;
  std::string path_;
  const std::string& origin_;
  std::set<std::string> seen_;
};

Link parse_link(Fields f, bool network) {
  Link l;
  l.kind = f.string("kind");
  static const std::set<std::string> kinds = {"nvswitch", "nvlink", "pcie",  "shm", "infiniband",
                                              "roce",     "tcp",    "ethernet"};
  if (!kinds.count(l.kind))
    f.fail("kind", "expected one of nvswitch, nvlink, pcie, shm (intra-node) or infiniband, roce, ethernet, tcp "
                   "(network), got \"" + l.kind + "\"");
  (void)network;
  l.bandwidth_gb_s = f.number("bandwidth_gb_s", 0, true);
  l.latency_us = f.number("latency_us", 0, false);
  l.efficiency = f.number_or("efficiency", 1.0, 0, true, 1.0);
  f.done();
  return l;
}

json link_json(const Link& l) {
  return {{"kind", l.kind},
          {"bandwidth_gb_s", l.bandwidth_gb_s},
          {"latency_us", l.latency_us},
          {"efficiency", l.efficiency}};
}

}  // namespace

double Device::peak_flops(const std::string& dtype) const {
  auto it = gemm.peak_flops.find(dtype);
  QK_CHECK(it != gemm.peak_flops.end(), "the cluster's device (", model, ") gives no peak for ", dtype,
           ": add it to device.peak_tflops");
  return it->second;
}

double StreamKernel::gb_s(double bytes) const {
  QK_CHECK(!samples.empty(), "StreamKernel::gb_s: no samples");
  if (bytes <= samples.front().bytes) return samples.front().gb_s;
  if (bytes >= samples.back().bytes) return samples.back().gb_s;
  for (size_t i = 1; i < samples.size(); ++i)
    if (bytes <= samples[i].bytes) {
      const double lo = std::log(samples[i - 1].bytes), hi = std::log(samples[i].bytes);
      const double w = hi > lo ? (std::log(bytes) - lo) / (hi - lo) : 1.0;
      return samples[i - 1].gb_s * (1 - w) + samples[i].gb_s * w;
    }
  return samples.back().gb_s;
}

double Cluster::node_network_gb_s() const {
  return network.nic.bandwidth_gb_s * network.nic.efficiency * network.nics_per_node;
}

Cluster parse_cluster(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    QK_THROW(ValueError, "cluster file ", origin, ": not valid JSON: ", e.what());
  }
  Fields top(j, "", origin);
  Cluster c;
  c.name = top.string("name");
  c.description = top.string_or("description", "");
  c.calibrated = top.string_or("calibrated", "");
  c.gpus_per_node = static_cast<int>(top.integer("gpus_per_node", 1));
  {
    Fields d = top.object("device");
    Device& dev = c.device;
    dev.model = d.string("model");
    {
      Fields p = d.object("peak_tflops");
      const json& pj = d.at("peak_tflops");
      for (auto it = pj.begin(); it != pj.end(); ++it) {
        static const std::set<std::string> dtypes = {"bf16", "fp16", "fp32", "tf32", "fp8"};
        if (!dtypes.count(it.key())) p.fail(it.key(), "unknown dtype (bf16, fp16, fp32, tf32, fp8)");
        dev.gemm.peak_flops[it.key()] = p.number(it.key(), 0, true) * 1e12;
      }
      if (dev.gemm.peak_flops.empty()) d.fail("peak_tflops", "give at least one dtype's peak");
      p.done();
    }
    {
      Fields g = d.object("gemm");
      dev.gemm.efficiency = g.number_or("efficiency", 0.8, 0, true, 1.0);
      dev.gemm.tile_m = g.integer_or("tile_m", 128, 1);
      dev.gemm.tile_n = g.integer_or("tile_n", 256, 1);
      dev.gemm.units = g.integer_or("units", 1, 1);
      if (g.has("samples")) {
        const json& s = g.at("samples");
        if (!s.is_array()) g.fail("samples", "expected an array of {m, n, k, dtype, tflops}");
        for (size_t i = 0; i < s.size(); ++i) {
          Fields e(s[i], g.name("samples") + "[" + std::to_string(i) + "]", origin);
          GemmSample x;
          x.m = e.integer("m", 1);
          x.n = e.integer("n", 1);
          x.k = e.integer("k", 1);
          x.dtype = e.string("dtype");
          if (!dev.gemm.peak_flops.count(x.dtype)) e.fail("dtype", "no peak_tflops given for \"" + x.dtype + "\"");
          x.flops = e.number("tflops", 0, true) * 1e12;
          e.done();
          dev.gemm.samples.push_back(x);
        }
      }
      g.done();
    }
    dev.flash_forward_efficiency = d.number_or("flash_forward_efficiency", 0.5, 0, true, 1.0);
    dev.flash_backward_efficiency = d.number_or("flash_backward_efficiency", 0.4, 0, true, 1.0);
    dev.memory_gb = d.number("memory_gb", 0, true);
    dev.memory_reserved_gb = d.number_or("memory_reserved_gb", 0, 0, false);
    if (dev.memory_reserved_gb >= dev.memory_gb)
      d.fail("memory_reserved_gb", "must be below memory_gb (" + std::to_string(dev.memory_gb) + ")");
    dev.memory_bandwidth_gb_s = d.number("memory_bandwidth_gb_s", 0, true);
    dev.memory_efficiency = d.number_or("memory_efficiency", 0.8, 0, true, 1.0);
    dev.kernel_floor_us = d.number_or("kernel_floor_us", 0, 0, false);
    if (d.has("stream_kernels")) {
      Fields sk = d.object("stream_kernels");
      const json& sj = d.at("stream_kernels");
      for (auto it = sj.begin(); it != sj.end(); ++it) {
        bool known = false;
        std::string names;
        for (const std::string& kind : streams::kinds())
          for (const auto pass : {streams::Pass::forward, streams::Pass::backward}) {
            known = known || it.key() == streams::key(kind, pass);
            names += (names.empty() ? "" : ", ") + streams::key(kind, pass);
          }
        for (const std::string& kind : streams::parameter_kinds()) {
          known = known || it.key() == kind;
          names += ", " + kind;
        }
        if (!known) sk.fail(it.key(), "unknown kernel kind (known: " + names + ")");
        Fields k = sk.object(it.key());
        const json& arr = k.at("samples");
        if (!arr.is_array() || arr.empty()) k.fail("samples", "expected a non-empty array of {bytes, gb_s}");
        StreamKernel x;
        for (size_t i = 0; i < arr.size(); ++i) {
          Fields e(arr[i], k.name("samples") + "[" + std::to_string(i) + "]", origin);
          x.samples.push_back({e.number("bytes", 0, true), e.number("gb_s", 0, true)});
          e.done();
        }
        std::sort(x.samples.begin(), x.samples.end(),
                  [](const StreamSample& a, const StreamSample& b) { return a.bytes < b.bytes; });
        k.done();
        dev.stream_kernels[it.key()] = x;
      }
      sk.done();
    }
    dev.cpu_cores = static_cast<int>(d.integer_or("cpu_cores", 0, 0));
    dev.threads_per_rank = static_cast<int>(d.integer_or("threads_per_rank", 0, 0));
    dev.shared_efficiency = d.number_or("shared_efficiency", 1.0, 0, true, 1.0);
    dev.oversubscribed_efficiency = d.number_or("oversubscribed_efficiency", 1.0, 0, true, 1.0);
    d.done();
  }
  c.intra = parse_link(top.object("intra"), false);
  {
    Fields n = top.object("network");
    c.network.nic = parse_link(n.object("nic"), true);
    c.network.nics_per_node = static_cast<int>(n.integer("nics_per_node", 1));
    c.network.topology = n.string_or("topology", "fat-tree");
    static const std::set<std::string> topologies = {"fat-tree", "rail", "single-switch"};
    if (!topologies.count(c.network.topology))
      n.fail("topology", "expected fat-tree, rail or single-switch, got \"" + c.network.topology + "\"");
    n.done();
  }
  if (top.has("sources")) {
    Fields s = top.object("sources");
    const json& sj = top.at("sources");
    for (auto it = sj.begin(); it != sj.end(); ++it) c.sources[it.key()] = s.string(it.key());
    s.done();
  }
  top.done();
  return c;
}

std::string cluster_to_json(const Cluster& c) {
  json dev;
  const Device& d = c.device;
  json peaks = json::object();
  for (const auto& [k, v] : d.gemm.peak_flops) peaks[k] = v / 1e12;
  json gemm = {{"efficiency", d.gemm.efficiency},
               {"tile_m", d.gemm.tile_m},
               {"tile_n", d.gemm.tile_n},
               {"units", d.gemm.units}};
  if (!d.gemm.samples.empty()) {
    json s = json::array();
    for (const auto& x : d.gemm.samples)
      s.push_back({{"m", x.m}, {"n", x.n}, {"k", x.k}, {"dtype", x.dtype}, {"tflops", x.flops / 1e12}});
    gemm["samples"] = s;
  }
  dev = {{"model", d.model},
         {"peak_tflops", peaks},
         {"gemm", gemm},
         {"flash_forward_efficiency", d.flash_forward_efficiency},
         {"flash_backward_efficiency", d.flash_backward_efficiency},
         {"memory_gb", d.memory_gb},
         {"memory_reserved_gb", d.memory_reserved_gb},
         {"memory_bandwidth_gb_s", d.memory_bandwidth_gb_s},
         {"memory_efficiency", d.memory_efficiency},
         {"kernel_floor_us", d.kernel_floor_us}};
  if (!d.stream_kernels.empty()) {
    json sk = json::object();
    for (const auto& [k, v] : d.stream_kernels) {
      json samples = json::array();
      for (const StreamSample& x : v.samples) samples.push_back({{"bytes", x.bytes}, {"gb_s", x.gb_s}});
      sk[k] = {{"samples", samples}};
    }
    dev["stream_kernels"] = sk;
  }
  if (d.cpu_cores > 0) dev["cpu_cores"] = d.cpu_cores;
  if (d.threads_per_rank > 0) dev["threads_per_rank"] = d.threads_per_rank;
  if (d.shared_efficiency < 1.0) dev["shared_efficiency"] = d.shared_efficiency;
  if (d.oversubscribed_efficiency < 1.0) dev["oversubscribed_efficiency"] = d.oversubscribed_efficiency;
  json j = {{"name", c.name},
            {"description", c.description},
            {"gpus_per_node", c.gpus_per_node},
            {"device", dev},
            {"intra", link_json(c.intra)},
            {"network",
             {{"nic", link_json(c.network.nic)},
              {"nics_per_node", c.network.nics_per_node},
              {"topology", c.network.topology}}}};
  if (!c.calibrated.empty()) j["calibrated"] = c.calibrated;
  if (!c.sources.empty()) j["sources"] = c.sources;
  return j.dump(2) + "\n";
}

std::string calibration_path() {
  const std::string set = env_calibration.reload();
  if (!set.empty()) return set;
  const std::string xdg = env_xdg_cache.reload();
  if (!xdg.empty()) return xdg + "/qianka/sim-local.json";
  const std::string home = env_home.reload();
  return (home.empty() ? std::string(".") : home + "/.cache") + "/qianka/sim-local.json";
}

std::vector<ClusterPreset> cluster_presets() {
  std::vector<ClusterPreset> out;
  for (const auto& p : detail::embedded_presets()) {
    const Cluster c = parse_cluster(std::string(p.json), std::string(p.name) + " (preset)");
    out.push_back({c.name, c.description});
  }
  out.push_back({"local", "this machine, from `qk sim calibrate` (" + calibration_path() + ")"});
  return out;
}

Cluster load_cluster(const std::string& name) {
  QK_CHECK(!name.empty(), "--cluster: give a preset name or a cluster file (qk sim --list-clusters)");
  for (const auto& p : detail::embedded_presets())
    if (name == p.name) return parse_cluster(std::string(p.json), name + " (preset)");
  if (name == "local") {
    const std::string path = calibration_path();
    QK_CHECK(file_exists(path), "cluster 'local': no calibration file at ", path,
             "; run `qk sim calibrate` first (or set QK_SIM_CALIBRATION)");
    return parse_cluster(read_file(path), path);
  }
  if (!file_exists(name)) {
    std::string names;
    for (const auto& p : cluster_presets()) names += (names.empty() ? "" : ", ") + p.name;
    QK_THROW(ValueError, "--cluster ", name, ": no such preset or file; the presets are ", names);
  }
  return parse_cluster(read_file(name), name);
}

}  // namespace qk::sim
