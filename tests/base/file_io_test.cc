#include "qk/base/file_io.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "qk/base/error.h"

namespace {

std::string temp_dir() {
  auto d = std::filesystem::temp_directory_path() / ("qk_fileio_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

TEST(AtomicWrite, WritesAndReplaces) {
  auto d = temp_dir();
  std::string p = d + "/a.bin";
  qk::atomic_write_file(p, std::string_view("first"));
  EXPECT_EQ(qk::read_file(p), "first");
  qk::atomic_write_file(p, std::string_view("second"));
  EXPECT_EQ(qk::read_file(p), "second");
  std::filesystem::remove_all(d);
}

TEST(AtomicWrite, UncommittedWriterLeavesOldFile) {
  auto d = temp_dir();
  std::string p = d + "/b.bin";
  qk::atomic_write_file(p, std::string_view("old"));
  {
    qk::AtomicFileWriter w(p);
    w.write("new", 3);
  }  // no commit: as if the process died mid-write
  EXPECT_EQ(qk::read_file(p), "old");
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(d)) (void)e, ++files;
  EXPECT_EQ(files, 1) << "temporary file left behind";
  std::filesystem::remove_all(d);
}

TEST(MappedFile, MapsContents) {
  auto d = temp_dir();
  std::string p = d + "/c.bin";
  qk::atomic_write_file(p, std::string_view("hello"));
  qk::MappedFile f(p);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), f.size()), "hello");
  std::filesystem::remove_all(d);
}

TEST(MappedFile, MissingFileIsIoError) {
  EXPECT_THROW(qk::MappedFile("/nonexistent/qk/file"), qk::IoError);
  EXPECT_THROW(qk::read_file("/nonexistent/qk/file"), qk::IoError);
}

}  // namespace
