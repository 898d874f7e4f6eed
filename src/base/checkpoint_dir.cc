#include "qk/base/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "qk/base/error.h"
#include "qk/base/fault.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"

namespace qk {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kFormat = "qk-checkpoint-v1";

void check_name(const std::string& name) {
  const bool ok = !name.empty() && name[0] != '.' && name != kManifest &&
                  std::all_of(name.begin(), name.end(), [](char ch) {
                    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
                  });
  QK_CHECK_AS(ValueError, ok, "Checkpoint or file name '", name,
              "' is not allowed: use letters, digits, '_', '-', '.' and do not start with '.'");
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) QK_WARN("could not remove '{}': {}", path, ec.message());
}

}  // namespace

std::string file_xxh3_hex(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QK_CHECK_AS(IoError, fd >= 0, "cannot open '", path, "': ", detail::errno_string(errno));
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = errno;
      if (r < 0) {
        ::close(fd);
        XXH3_freeState(st);
        QK_THROW(IoError, "reading '", path, "' failed: ", detail::errno_string(err));
      }
      break;
    }
    XXH3_64bits_update(st, buf.data(), static_cast<size_t>(r));
  }
  ::close(fd);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{:016x}", h);
}

// ---- writer ----

CheckpointWriter::CheckpointWriter(std::string root, std::string name, int keep_last)
    : root_(std::move(root)), name_(std::move(name)), keep_last_(keep_last) {
  tmp_ = root_ + "/.tmp-" + name_ + "-" + std::to_string(::getpid());
  remove_tree(tmp_);
  make_dirs(tmp_);
}

CheckpointWriter::CheckpointWriter(CheckpointWriter&& o) noexcept
    : root_(std::move(o.root_)), name_(std::move(o.name_)), tmp_(std::move(o.tmp_)),
      keep_last_(o.keep_last_), done_(o.done_) {
  o.done_ = true;
}

CheckpointWriter::~CheckpointWriter() {
  if (!done_) remove_tree(tmp_);
}

std::string CheckpointWriter::file(const std::string& file) const {
  check_name(file);
  return tmp_ + "/" + file;
}

CheckpointInfo CheckpointWriter::commit(const std::string& meta_json) {
  QK_CHECK_AS(IoError, !done_, "checkpoint '", name_, "' committed twice");
  json meta;
  try {
    meta = json::parse(meta_json);
  } catch (const json::exception& e) {
    QK_THROW(ValueError, "checkpoint '", name_, "': metadata is not JSON (", e.what(), ")");
  }
  json files = json::array();
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(tmp_)) {
    QK_CHECK_AS(IoError, entry.is_regular_file(), "checkpoint '", name_, "': '", entry.path().string(),
                "' is not a plain file; checkpoints hold files only");
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  for (const std::string& f : names) {
    QK_CHECK_AS(ValueError, f != kManifest, "checkpoint '", name_, "': the caller wrote ", kManifest,
                ", which is the checkpoint's own file; use another name");
    const std::string p = tmp_ + "/" + f;
    fsync_path(p, false);
    files.push_back({{"name", f}, {"bytes", fs::file_size(p)}, {"xxh3_64", file_xxh3_hex(p)}});
  }
  const json manifest = {{"format", kFormat}, {"name", name_}, {"files", files}, {"meta", meta}};
  atomic_write_file(tmp_ + "/" + kManifest, manifest.dump(2) + "\n");
  fsync_path(tmp_, true);
  // A test can kill the process here: every file is written but the
  // checkpoint is not published; the previous one must stay the newest.
  fault::point("checkpoint");

  const std::string final_path = root_ + "/" + name_;
  std::string old;
  if (fs::exists(final_path)) {  // the same step written again after a restart
    old = root_ + "/.old-" + name_ + "-" + std::to_string(::getpid());
    remove_tree(old);
    QK_CHECK_AS(IoError, ::rename(final_path.c_str(), old.c_str()) == 0, "cannot move '", final_path, "' aside: ",
                detail::errno_string(errno));
  }
  QK_CHECK_AS(IoError, ::rename(tmp_.c_str(), final_path.c_str()) == 0, "cannot rename '", tmp_, "' to '",
              final_path, "': ", detail::errno_string(errno), "; is the folder writable?");
  done_ = true;
  fsync_path(root_, true);
  if (!old.empty()) remove_tree(old);

  // Keep the newest keep_last (by name order) and drop the rest.
  const CheckpointDir dir(root_, keep_last_);
  const std::vector<std::string> all = dir.list();
  for (size_t i = 0; i + static_cast<size_t>(keep_last_) < all.size(); ++i) {
    QK_DEBUG("removing old checkpoint {}/{}", root_, all[i]);
    remove_tree(root_ + "/" + all[i]);
  }
  return {name_, final_path, meta.dump()};
}

// ---- folder ----

CheckpointDir::CheckpointDir(std::string root, int keep_last) : root_(std::move(root)), keep_last_(keep_last) {
  QK_CHECK_AS(ValueError, keep_last_ >= 1, "keep the last N checkpoints: N must be >= 1, got ", keep_last_);
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

CheckpointWriter CheckpointDir::begin(const std::string& name) const {
  check_name(name);
  make_dirs(root_);
  // Leftovers of a writer that died (killed mid-write): never published, so
  // nobody reads them; only this job writes here.
  for (const auto& entry : fs::directory_iterator(root_)) {
    const std::string f = entry.path().filename().string();
    if (entry.is_directory() && (f.starts_with(".tmp-") || f.starts_with(".old-"))) {
      QK_DEBUG("removing unfinished checkpoint folder {}", entry.path().string());
      remove_tree(entry.path().string());
    }
  }
  return CheckpointWriter(root_, name, keep_last_);
}

std::vector<std::string> CheckpointDir::list() const {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root_)) {
    const std::string f = entry.path().filename().string();
    if (entry.is_directory() && f[0] != '.' && fs::exists(entry.path() / kManifest)) out.push_back(f);
  }
  std::sort(out.begin(), out.end());
  return out;
}

CheckpointInfo CheckpointDir::verify(const std::string& name) const {
  check_name(name);
  const std::string dir = root_ + "/" + name;
  const std::string mpath = dir + "/" + kManifest;
  QK_CHECK_AS(IoError, file_exists(mpath), "checkpoint '", dir, "' has no ", kManifest,
              " (not a checkpoint, or an unfinished one)");
  json m;
  try {
    m = json::parse(read_file(mpath));
    QK_CHECK_AS(IoError, m.at("format").get<std::string>() == kFormat, "checkpoint '", dir, "': ", kManifest,
                " has format '", m.at("format").get<std::string>(), "', expected ", kFormat);
    for (const json& f : m.at("files")) {
      const std::string fname = f.at("name").get<std::string>();
      check_name(fname);
      const std::string p = dir + "/" + fname;
      QK_CHECK_AS(IoError, file_exists(p), "checkpoint '", dir, "': file ", fname, " listed in the manifest is missing");
      const uint64_t want = f.at("bytes").get<uint64_t>();
      const uint64_t have = fs::file_size(p);
      QK_CHECK_AS(IoError, have == want, "checkpoint '", dir, "': ", fname, " has ", have, " bytes, the manifest says ",
                  want, " (truncated or replaced)");
      const std::string sum = file_xxh3_hex(p);
      QK_CHECK_AS(IoError, sum == f.at("xxh3_64").get<std::string>(), "checkpoint '", dir, "': ", fname,
                  " fails its checksum (xxh3 ", sum, ", manifest ", f.at("xxh3_64").get<std::string>(),
                  "): the file is corrupt");
    }
    return {name, dir, m.at("meta").dump()};
  } catch (const json::exception& e) {
    QK_THROW(IoError, "checkpoint '", dir, "': ", kManifest, " is not valid (", e.what(), ")");
  }
}

std::optional<CheckpointInfo> CheckpointDir::latest_valid(std::vector<std::string>* skipped) const {
  const std::vector<std::string> all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      return verify(*it);
    } catch (const IoError& e) {
      QK_WARN("skipping checkpoint {}: {}", *it, e.what());
      if (skipped) skipped->push_back(*it);
    }
  }
  return std::nullopt;
}

}  // namespace qk
