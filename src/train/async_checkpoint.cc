// Asynchronous checkpoint saves (async_checkpoint.h).
#include "qk/train/async_checkpoint.h"

#include <chrono>
#include <exception>
#include <utility>

#include "qk/base/log.h"

namespace qk::train {

AsyncCheckpointSaver::AsyncCheckpointSaver(CheckpointDir ckpts) : ckpts_(std::move(ckpts)) {}

AsyncCheckpointSaver::~AsyncCheckpointSaver() {
  try {
    wait();
  } catch (const std::exception& e) {
    QK_ERROR("asynchronous checkpoint save failed: {}", e.what());
  }
}

std::optional<CheckpointInfo> AsyncCheckpointSaver::save(const std::string& name, CheckpointSnapshot snap) {
  std::optional<CheckpointInfo> previous = wait();
  // The snapshot moves into the writer: nothing of it is shared with training.
  pending_ = std::async(std::launch::async, [ckpts = ckpts_, name, snap = std::move(snap)] {
    return save_snapshot(ckpts, name, snap);
  });
  return previous;
}

std::optional<CheckpointInfo> AsyncCheckpointSaver::poll() {
  if (!pending_.valid() || pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
    return std::nullopt;
  return pending_.get();  // rethrows the writer's error
}

std::optional<CheckpointInfo> AsyncCheckpointSaver::wait() {
  if (!pending_.valid()) return std::nullopt;
  return pending_.get();  // waits; rethrows the writer's error
}

}  // namespace qk::train
