// Files: whole reads, crash-safe writes, read-only memory maps.
//
//   qk::atomic_write_file("ckpt/model.safetensors", bytes);   // all or nothing
//   qk::MappedFile f("data.idx");                               // f.data(), f.size()
//
// atomic_write_file writes to "<path>.tmp.<pid>", fsyncs it, renames it over
// <path> and fsyncs the directory: a crash leaves the old file or the new
// one, never a torn mix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qk {

std::string read_file(const std::string& path);
void atomic_write_file(const std::string& path, std::span<const std::byte> data);
void atomic_write_file(const std::string& path, std::string_view data);
bool file_exists(const std::string& path);
// mkdir -p; throws IoError naming the path on failure.
void make_dirs(const std::string& path);
// fsync a file (throws IoError on failure) or a folder, so that renames inside
// it are durable (best effort: some filesystems refuse folder fds).
void fsync_path(const std::string& path, bool is_dir);

// Streams into a temporary file and publishes it on commit(); destroying an
// uncommitted writer removes the temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(const void* data, size_t n);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  std::string path_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace qk
