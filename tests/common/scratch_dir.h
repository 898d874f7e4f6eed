// A CLI test file's scratch folders: build/test_tmp/<suite>/<pid>/<name>,
// per process because ctest runs several test processes at once; the root is
// removed at exit when every test passed (left to look at otherwise).
//
//   const qk::test::ScratchRoot kScratch("pretrain_gpt");
//   const std::string dir = kScratch.fresh("sigterm");   // emptied and created
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace qk::test {

class ScratchRoot {
 public:
  explicit ScratchRoot(const std::string& suite)
      : root_(std::filesystem::path(QK_BINARY_DIR) / "test_tmp" / suite / std::to_string(::getpid())) {
    ::testing::AddGlobalTestEnvironment(new RemoveAtExit(root_));
  }
  const std::filesystem::path& root() const { return root_; }
  std::string fresh(const std::string& name) const {
    const std::filesystem::path p = root_ / name;
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    return p.string();
  }

 private:
  class RemoveAtExit : public ::testing::Environment {
   public:
    explicit RemoveAtExit(std::filesystem::path p) : p_(std::move(p)) {}
    void TearDown() override {
      if (!::testing::UnitTest::GetInstance()->Failed()) std::filesystem::remove_all(p_);
    }

   private:
    std::filesystem::path p_;
  };
  std::filesystem::path root_;
};

}  // namespace qk::test
