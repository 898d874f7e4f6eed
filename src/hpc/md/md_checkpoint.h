// qk md's checkpoints: the state a leap-frog run needs to go on from the start
// of a step, in a crash-safe qk::CheckpointDir folder (checkpoint_dir.h):
// state.trr (one double-precision frame: x(t) and v(t - dt/2), step, time,
// box; any GROMACS tool reads it) and the manifest's metadata (the
// thermostat's generator, the kinetic-energy tensor at t - dt/2 the loop
// carries, and the sizes the log and trajectories had, so a resumed run cuts
// them back there and appends: no frame twice, none lost).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qk/hpc/md/edr.h"

#include "qk/hpc/md/units.h"

namespace qk::md {

struct MdCheckpoint {
  std::string path;  // the checkpoint's folder (set by latest_md_checkpoint)
  int64_t step = 0;
  double time = 0;
  Vec3 box{};
  std::vector<Vec3> x, v;   // x(t), v(t - dt/2)
  Mat3 half_step_kinetic{};  // the loop's kinetic energy tensor at t - dt/2
  std::vector<double> half_step_group_kinetic;  // and each T-coupling group's kinetic energy then
  std::vector<std::string> thermostats;         // VRescale::save() per coupled group; empty without coupling
  EdrSums energy_sums;                          // the energy sums since the last frame and over the run
  double baros_integral = 0;                    // the pressure coupling's work (the conserved energy's share)
  int64_t trr_bytes = -1, xtc_bytes = -1, edr_bytes = -1, log_bytes = -1;  // -1: that output is not written
};

// Commits `c` to the CheckpointDir at dir as "step-<step>" (keeping the newest two).
void save_md_checkpoint(const std::string& dir, const MdCheckpoint& c);
// Removes the committed checkpoints in dir (a fresh run's first act: they are another run's state).
void clear_md_checkpoints(const std::string& dir);
// The newest checkpoint in dir that verifies; nullopt when dir does not exist or holds none.
std::optional<MdCheckpoint> latest_md_checkpoint(const std::string& dir);

}  // namespace qk::md
