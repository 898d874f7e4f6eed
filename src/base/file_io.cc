#include "qk/base/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "qk/base/error.h"

namespace qk {

namespace {
std::string dir_of(const std::string& path) {
  auto p = std::filesystem::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    QK_CHECK_AS(IoError, w >= 0, "writing '", path, "' failed: ", detail::errno_string(errno),
                "; check free disk space and permissions");
    p += w;
    n -= static_cast<size_t>(w);
  }
}
}  // namespace

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QK_CHECK_AS(IoError, fd >= 0, "cannot open '", path, "': ", detail::errno_string(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      ::close(fd);
      QK_THROW(IoError, "reading '", path, "' failed: ", detail::errno_string(e));
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void fsync_path(const std::string& path, bool is_dir) {
  const int fd = ::open(path.c_str(), (is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    QK_CHECK_AS(IoError, is_dir, "cannot open '", path, "' to sync it: ", detail::errno_string(errno));
    return;
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  QK_CHECK_AS(IoError, rc == 0 || is_dir, "fsync '", path, "' failed: ", detail::errno_string(err),
              "; check free disk space");
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  QK_CHECK_AS(IoError, !ec, "cannot create directory '", path, "': ", ec.message());
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  QK_CHECK_AS(IoError, fd_ >= 0, "cannot create '", tmp_, "': ", detail::errno_string(errno),
              "; does the directory exist and is it writable?");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::write(const void* data, size_t n) {
  QK_CHECK_AS(IoError, fd_ >= 0, "write to '", path_, "' after commit");
  write_all(fd_, data, n, tmp_);
}

void AtomicFileWriter::commit() {
  QK_CHECK_AS(IoError, fd_ >= 0, "'", path_, "' committed twice");
  QK_CHECK_AS(IoError, ::fsync(fd_) == 0, "fsync '", tmp_, "' failed: ", detail::errno_string(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp_.c_str());
    QK_THROW(IoError, "cannot rename '", tmp_, "' to '", path_, "': ", detail::errno_string(e));
  }
  fsync_path(dir_of(path_), true);
}

void atomic_write_file(const std::string& path, std::span<const std::byte> data) {
  AtomicFileWriter w(path);
  w.write(data.data(), data.size());
  w.commit();
}

void atomic_write_file(const std::string& path, std::string_view data) {
  atomic_write_file(path, std::as_bytes(std::span<const char>(data.data(), data.size())));
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QK_CHECK_AS(IoError, fd >= 0, "cannot open '", path, "': ", detail::errno_string(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    QK_THROW(IoError, "cannot stat '", path, "': ", detail::errno_string(e));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    ::close(fd);
    QK_CHECK_AS(IoError, p != MAP_FAILED, "cannot mmap '", path, "': ", detail::errno_string(e));
    data_ = static_cast<std::byte*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

}  // namespace qk
