#include "qk/base/checkpoint_dir.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& tag) {
  auto d = fs::temp_directory_path() / ("qk_ckpt_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d.string();
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

qk::CheckpointInfo save(const qk::CheckpointDir& d, const std::string& name, const std::string& payload) {
  qk::CheckpointWriter w = d.begin(name);
  write(w.file("model.bin"), "model:" + payload);
  write(w.file("optim.bin"), "optim:" + payload);
  return w.commit("{\"step\": \"" + payload + "\"}");
}

TEST(CheckpointDir, CommitPublishesAndLatestValidReadsIt) {
  const std::string root = fresh_dir("commit");
  const qk::CheckpointDir d(root, 3);
  EXPECT_FALSE(d.latest_valid().has_value());
  const auto info = save(d, "step-01", "1");
  EXPECT_EQ(info.path, root + "/step-01");
  const auto got = d.latest_valid();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->name, "step-01");
  EXPECT_EQ(got->meta, "{\"step\":\"1\"}");
  EXPECT_EQ(qk::read_file(got->path + "/model.bin"), "model:1");
  EXPECT_TRUE(fs::exists(got->path + "/manifest.json"));
  // Nothing temporary is left next to it.
  for (const auto& e : fs::directory_iterator(root)) EXPECT_EQ(e.path().filename(), "step-01");
  fs::remove_all(root);
}

TEST(CheckpointDir, KeepsOnlyTheLastN) {
  const std::string root = fresh_dir("keep");
  const qk::CheckpointDir d(root, 2);
  for (int i = 1; i <= 5; ++i) save(d, "step-0" + std::to_string(i), std::to_string(i));
  EXPECT_EQ(d.list(), (std::vector<std::string>{"step-04", "step-05"}));
  fs::remove_all(root);
}

TEST(CheckpointDir, CorruptNewestIsSkippedForTheOneBefore) {
  const std::string root = fresh_dir("corrupt");
  const qk::CheckpointDir d(root, 3);
  save(d, "step-01", "1");
  save(d, "step-02", "2");
  // Flip one byte of the newest checkpoint's model: same size, other checksum.
  std::string bytes = qk::read_file(root + "/step-02/model.bin");
  bytes[2] ^= 0x01;
  write(root + "/step-02/model.bin", bytes);
  std::vector<std::string> skipped;
  auto got = d.latest_valid(&skipped);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->name, "step-01");
  EXPECT_EQ(skipped, std::vector<std::string>{"step-02"});
  try {
    d.verify("step-02");
    ADD_FAILURE() << "verify accepted a corrupt file";
  } catch (const qk::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("model.bin fails its checksum"), std::string::npos) << e.what();
  }
  // Truncated and missing files are caught too.
  write(root + "/step-01/optim.bin", "optim");
  EXPECT_THROW(d.verify("step-01"), qk::IoError);
  fs::remove(root + "/step-01/optim.bin");
  EXPECT_THROW(d.verify("step-01"), qk::IoError);
  EXPECT_FALSE(d.latest_valid().has_value());
  // A manifest that is not JSON is an IoError, not a crash.
  write(root + "/step-02/manifest.json", "{not json");
  EXPECT_THROW(d.verify("step-02"), qk::IoError);
  fs::remove_all(root);
}

// A writer killed before commit leaves only its private folder: readers do
// not see it, the previous checkpoint stays the newest, the next begin()
// clears the leftovers.
TEST(CheckpointDir, WriterKilledMidWriteLeavesThePreviousCheckpoint) {
  const std::string root = fresh_dir("killed");
  const qk::CheckpointDir d(root, 3);
  save(d, "step-01", "1");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    qk::CheckpointWriter w = d.begin("step-02");
    write(w.file("model.bin"), "model:2");
    ::_exit(0);  // dies without commit and without running destructors
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  bool leftover = false;
  for (const auto& e : fs::directory_iterator(root)) leftover |= e.path().filename().string().starts_with(".tmp-");
  EXPECT_TRUE(leftover) << "the child should have left its temporary folder";
  EXPECT_EQ(d.list(), std::vector<std::string>{"step-01"});
  EXPECT_EQ(d.latest_valid()->name, "step-01");
  save(d, "step-02", "2b");
  for (const auto& e : fs::directory_iterator(root)) EXPECT_NE(e.path().filename().string()[0], '.');
  EXPECT_EQ(qk::read_file(root + "/step-02/model.bin"), "model:2b");
  fs::remove_all(root);
}

TEST(CheckpointDir, RewritingANameReplacesItAndUncommittedWritersClean) {
  const std::string root = fresh_dir("rewrite");
  const qk::CheckpointDir d(root, 3);
  save(d, "step-01", "a");
  save(d, "step-01", "b");
  EXPECT_EQ(qk::read_file(d.latest_valid()->path + "/model.bin"), "model:b");
  {
    qk::CheckpointWriter w = d.begin("step-02");
    write(w.file("model.bin"), "x");
  }  // destroyed without commit (an exception while saving)
  EXPECT_EQ(d.list(), std::vector<std::string>{"step-01"});
  for (const auto& e : fs::directory_iterator(root)) EXPECT_EQ(e.path().filename(), "step-01");
  fs::remove_all(root);
}

TEST(CheckpointDir, RejectsBadNamesAndArguments) {
  const std::string root = fresh_dir("names");
  EXPECT_THROW(qk::CheckpointDir(root, 0), qk::ValueError);
  const qk::CheckpointDir d(root, 1);
  EXPECT_THROW(d.begin("../escape"), qk::ValueError);
  EXPECT_THROW(d.begin(".hidden"), qk::ValueError);
  qk::CheckpointWriter w = d.begin("ok");
  EXPECT_THROW(w.file("a/b"), qk::ValueError);
  EXPECT_THROW(w.file("manifest.json"), qk::ValueError);  // the checkpoint's own file
  EXPECT_THROW(w.commit("not json"), qk::ValueError);
  fs::remove_all(root);
}

}  // namespace
