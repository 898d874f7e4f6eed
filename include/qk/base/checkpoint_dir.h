// A folder of checkpoints that survives crashes: each checkpoint is a
// directory written under a temporary name, checksummed, fsynced and renamed
// into place, so a reader sees a whole checkpoint or none.
//
//   qk::CheckpointDir ckpts("runs/x/checkpoints", /*keep_last=*/3);
//   {
//     qk::CheckpointWriter w = ckpts.begin("step-0000000120");
//     save_weights(w.file("model.safetensors"));     // plain writes are fine:
//     save_optimizer(w.file("optim.safetensors"));   // the folder is private
//     w.commit(R"({"epoch": 3})");                   // manifest, fsync, rename, prune
//   }
//   if (auto c = ckpts.latest_valid())               // newest that verifies
//     load_weights(c->path + "/model.safetensors");
//
// Layout: ROOT/<name>/ holds the caller's files plus manifest.json (format,
// name, each file's size and XXH3-64 checksum, the caller's metadata JSON).
// A checkpoint being written lives in ROOT/.tmp-<name>-<pid>/ until commit;
// a writer that dies leaves only that folder, which the next begin() removes.
// Names sort in checkpoint order (zero-pad numbers); commit keeps the newest
// keep_last and deletes the rest.
//
// latest_valid() checks every file of the newest checkpoint against its
// manifest and, on a mismatch (a torn copy, a flipped bit, a missing file),
// logs a warning naming the checkpoint and the file and tries the next older.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace qk {

struct CheckpointInfo {
  std::string name;  // "step-0000000120"
  std::string path;  // ROOT/name
  std::string meta;  // the metadata JSON given to commit()
};

class CheckpointWriter {
 public:
  CheckpointWriter(CheckpointWriter&& o) noexcept;
  CheckpointWriter& operator=(CheckpointWriter&&) = delete;
  CheckpointWriter(const CheckpointWriter&) = delete;
  ~CheckpointWriter();  // an uncommitted checkpoint is removed

  // Where to write `file` (a plain name, no '/'), inside the private folder.
  std::string file(const std::string& file) const;
  // Checksums every file, writes manifest.json, fsyncs, renames the folder to
  // ROOT/<name> (replacing one of that name), then prunes old checkpoints.
  // `meta_json` must be a JSON value (object, usually).
  CheckpointInfo commit(const std::string& meta_json);

 private:
  friend class CheckpointDir;
  CheckpointWriter(std::string root, std::string name, int keep_last);
  std::string root_, name_, tmp_;
  int keep_last_ = 0;
  bool done_ = false;
};

class CheckpointDir {
 public:
  // keep_last >= 1: how many committed checkpoints commit() leaves.
  explicit CheckpointDir(std::string root, int keep_last = 3);

  const std::string& root() const { return root_; }
  // Starts checkpoint `name` ([A-Za-z0-9_.-], not starting with '.'); creates
  // ROOT and removes leftovers of writers that died.
  CheckpointWriter begin(const std::string& name) const;
  // Committed checkpoints (folders holding manifest.json), oldest first.
  std::vector<std::string> list() const;
  // Throws IoError naming the checkpoint, the file and what is wrong when a
  // file is missing, has another size or checksum, or the manifest is bad.
  CheckpointInfo verify(const std::string& name) const;
  // The newest checkpoint that verifies; corrupt ones are skipped with a
  // warning (and their names appended to `skipped` when given).
  std::optional<CheckpointInfo> latest_valid(std::vector<std::string>* skipped = nullptr) const;

 private:
  std::string root_;
  int keep_last_;
};

// XXH3-64 of a file's bytes, as 16 hex digits (the manifest's checksum).
std::string file_xxh3_hex(const std::string& path);

}  // namespace qk
