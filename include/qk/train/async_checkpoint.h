// Asynchronous checkpoint saves (Megatron's --async-save): the training step
// pays only for a host copy of the state (snapshot_train_state); a background
// thread writes it as save_checkpoint would, through CheckpointDir's private
// folder and rename, so a crash during the write leaves the previous
// checkpoint the newest valid one. At most one save is in flight: a new one
// first waits for the last.
//
//   qk::train::AsyncCheckpointSaver saver(qk::CheckpointDir("runs/x/checkpoints"));
//   saver.save(qk::train::iteration_folder(it), qk::train::snapshot_train_state(st, m));
//   ... training steps ...
//   if (auto done = saver.poll()) log(done->path);   // a finished save, once
//   saver.wait();                                     // before exit: the last one is on disk
//
// A failed write is rethrown by the next poll(), save() or wait().
#pragma once

#include <future>
#include <optional>
#include <string>

#include "qk/base/checkpoint_dir.h"
#include "qk/train/checkpoint.h"

namespace qk::train {

class AsyncCheckpointSaver {
 public:
  explicit AsyncCheckpointSaver(CheckpointDir ckpts);
  // Waits for the save in flight (an error is logged: a destructor cannot throw).
  ~AsyncCheckpointSaver();
  AsyncCheckpointSaver(const AsyncCheckpointSaver&) = delete;
  AsyncCheckpointSaver& operator=(const AsyncCheckpointSaver&) = delete;

  // Writes `snap` as step folder `name` in the background, after the save in
  // flight (if any) has finished; returns that one's result when there was one.
  std::optional<CheckpointInfo> save(const std::string& name, CheckpointSnapshot snap);
  // The save in flight when it has finished (its result, once); nullopt while
  // it runs or when none is in flight.
  std::optional<CheckpointInfo> poll();
  // Waits for the save in flight; its result (nullopt when none was in flight).
  std::optional<CheckpointInfo> wait();
  bool in_flight() const { return pending_.valid(); }

 private:
  CheckpointDir ckpts_;
  std::future<CheckpointInfo> pending_;
};

}  // namespace qk::train
