#include "qk/hpc/md/output_file.h"

#include <filesystem>
#include <system_error>

#include "qk/base/error.h"

namespace qk::md {

OutputFile::OutputFile(const std::string& path, std::optional<uint64_t> keep_bytes) : path_(path) {
  if (!keep_bytes) {
    out_.open(path, std::ios::binary | std::ios::trunc);
    QK_CHECK(out_.good(), "cannot write ", path, " (check the folder exists and is writable)");
    return;
  }
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  QK_CHECK(!ec && size >= *keep_bytes, "cannot resume ", path, ": the checkpoint expects ", *keep_bytes,
           " bytes written before it, the file ", ec ? "is missing" : "has " + std::to_string(size),
           " (restore the file or start without -cpi)");
  std::filesystem::resize_file(path, *keep_bytes);
  out_.open(path, std::ios::binary | std::ios::app);
  QK_CHECK(out_.good(), "cannot append to ", path);
  bytes_ = *keep_bytes;
}

void OutputFile::write(std::string_view record) {
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
  bytes_ += record.size();
  QK_CHECK(out_.good(), "writing ", path_, " failed (disk full?)");
}

}  // namespace qk::md
