#include "md_checkpoint.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "qk/base/checkpoint_dir.h"
#include "qk/base/error.h"
#include "qk/hpc/md/trr.h"

namespace qk::md {
namespace {

constexpr char kFormat[] = "qk-md-state-1";

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

}  // namespace

void save_md_checkpoint(const std::string& dir, const MdCheckpoint& c) {
  CheckpointDir ckpts(dir, /*keep_last=*/2);
  char name[32];
  std::snprintf(name, sizeof name, "step-%010" PRId64, c.step);
  CheckpointWriter w = ckpts.begin(name);
  {
    TrrWriter state(w.file("state.trr"), /*double_precision=*/true);
    TrrFrame fr;
    fr.step = c.step;
    fr.time = c.time;
    for (int d = 0; d < 3; ++d) fr.box[d][d] = c.box[d];
    fr.x = c.x;
    fr.v = c.v;
    state.write(fr);
  }
  nlohmann::json meta;
  meta["format"] = kFormat;
  meta["step"] = c.step;
  meta["natoms"] = c.x.size();
  nlohmann::json ke = nlohmann::json::array();
  for (const Vec3& row : c.half_step_kinetic)
    for (double e : row) ke.push_back(hex(e));  // exact: the resumed run continues bit for bit
  meta["half_step_kinetic"] = ke;
  nlohmann::json group_ke = nlohmann::json::array();
  for (double e : c.half_step_group_kinetic) group_ke.push_back(hex(e));
  meta["half_step_group_kinetic"] = group_ke;
  meta["thermostats"] = c.thermostats;
  meta["baros_integral"] = hex(c.baros_integral);
  auto hexes = [&](const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double e : v) a.push_back(hex(e));
    return a;
  };
  meta["energy_sums"] = {{"nsum", c.energy_sums.nsum},
                         {"esum", hexes(c.energy_sums.esum)},
                         {"eav", hexes(c.energy_sums.eav)},
                         {"nsum_run", c.energy_sums.nsum_run},
                         {"esum_run", hexes(c.energy_sums.esum_run)}};
  meta["trr_bytes"] = c.trr_bytes;
  meta["xtc_bytes"] = c.xtc_bytes;
  meta["edr_bytes"] = c.edr_bytes;
  meta["log_bytes"] = c.log_bytes;
  w.commit(meta.dump());
}

void clear_md_checkpoints(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) return;
  for (const std::string& name : CheckpointDir(dir, 2).list()) std::filesystem::remove_all(dir + "/" + name);
}

std::optional<MdCheckpoint> latest_md_checkpoint(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) return std::nullopt;
  const std::optional<CheckpointInfo> info = CheckpointDir(dir, 2).latest_valid();
  if (!info) return std::nullopt;
  const nlohmann::json meta = nlohmann::json::parse(info->meta, nullptr, /*allow_exceptions=*/false);
  QK_CHECK(meta.is_object() && meta.value("format", "") == kFormat, info->path,
           ": not a qk md checkpoint (its manifest's format is not ", kFormat, ")");
  MdCheckpoint c;
  c.path = info->path;
  const std::vector<TrrFrame> frames = read_trr(info->path + "/state.trr");
  QK_CHECK(frames.size() == 1 && frames[0].x.size() == frames[0].v.size() && frames[0].double_precision,
           info->path, "/state.trr: expected one double-precision frame with positions and velocities");
  c.step = frames[0].step;
  QK_CHECK(c.step == meta.value("step", int64_t{-1}), info->path, ": state.trr is of step ", c.step,
           ", the manifest says ", meta.value("step", int64_t{-1}));
  c.time = frames[0].time;
  for (int d = 0; d < 3; ++d) c.box[d] = frames[0].box[d][d];
  c.x = frames[0].x;
  c.v = frames[0].v;
  const nlohmann::json& ke = meta.at("half_step_kinetic");
  QK_CHECK(ke.is_array() && ke.size() == 9, info->path, ": half_step_kinetic must hold 9 numbers");
  for (int k = 0; k < 9; ++k) c.half_step_kinetic[k / 3][k % 3] = std::strtod(ke[k].get<std::string>().c_str(), nullptr);
  if (meta.contains("half_step_group_kinetic"))
    for (const nlohmann::json& e : meta.at("half_step_group_kinetic"))
      c.half_step_group_kinetic.push_back(std::strtod(e.get<std::string>().c_str(), nullptr));
  if (meta.contains("thermostats")) c.thermostats = meta.at("thermostats").get<std::vector<std::string>>();
  if (meta.contains("baros_integral"))
    c.baros_integral = std::strtod(meta.at("baros_integral").get<std::string>().c_str(), nullptr);
  if (meta.contains("energy_sums")) {
    const nlohmann::json& es = meta.at("energy_sums");
    auto numbers = [&](const char* key) {
      std::vector<double> v;
      for (const nlohmann::json& e : es.at(key)) v.push_back(std::strtod(e.get<std::string>().c_str(), nullptr));
      return v;
    };
    c.energy_sums.nsum = es.at("nsum").get<int64_t>();
    c.energy_sums.esum = numbers("esum");
    c.energy_sums.eav = numbers("eav");
    c.energy_sums.nsum_run = es.at("nsum_run").get<int64_t>();
    c.energy_sums.esum_run = numbers("esum_run");
  }
  c.trr_bytes = meta.value("trr_bytes", int64_t{-1});
  c.xtc_bytes = meta.value("xtc_bytes", int64_t{-1});
  c.edr_bytes = meta.value("edr_bytes", int64_t{-1});
  c.log_bytes = meta.value("log_bytes", int64_t{-1});
  return c;
}

}  // namespace qk::md
