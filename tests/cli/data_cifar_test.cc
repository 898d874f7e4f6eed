// End to end: qk data synth-cifar -> qk data cifar-info, and the errors a
// broken folder gives, through the `qk` binary.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/run_qk.h"
#include "data/test_util.h"
#include "qk/base/file_io.h"

namespace {
namespace fs = std::filesystem;
using qk::test::run_qk;
using qk::test::TempDir;

TEST(DataCifarCli, SynthThenInfo) {
  TempDir dir("cli_cifar");
  auto r = run_qk("data synth-cifar --out '" + dir.path() + "' --num-train 120 --num-test 30 --seed 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote a SYNTHETIC CIFAR-10 (120 training + 30 test images, seed 5)"), std::string::npos)
      << r.output;
  const std::string b = dir / "cifar-10-batches-bin";
  EXPECT_EQ(fs::file_size(b + "/data_batch_1.bin"), 24u * 3073);
  EXPECT_EQ(fs::file_size(b + "/test_batch.bin"), 30u * 3073);
  EXPECT_TRUE(qk::file_exists(b + "/batches.meta.txt"));

  r = run_qk("data cifar-info '" + dir.path() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SYNTHETIC"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train       120 images"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test        30 images"), std::string::npos) << r.output;
  // Balanced: 12 of each class in training, 3 in test.
  EXPECT_NE(r.output.find("airplane 12, automobile 12"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truck 3\n"), std::string::npos) << r.output;

  // The same seed writes the same bytes.
  TempDir again("cli_cifar_again");
  ASSERT_EQ(run_qk("data synth-cifar --out '" + again.path() + "' --num-train 120 --num-test 30 --seed 5").exit_code,
            0);
  EXPECT_EQ(qk::read_file(b + "/data_batch_3.bin"), qk::read_file(again / "cifar-10-batches-bin/data_batch_3.bin"));
}

TEST(DataCifarCli, BrokenFolderAndBadFlagsFailClearly) {
  TempDir dir("cli_cifar_bad");
  auto r = run_qk("data cifar-info '" + dir.path() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("CIFAR-10 data not found"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("qk data synth-cifar --out DIR"), std::string::npos) << r.output;

  ASSERT_EQ(run_qk("data synth-cifar --out '" + dir.path() + "' --num-train 10 --num-test 10").exit_code, 0);
  fs::resize_file(dir / "cifar-10-batches-bin/data_batch_2.bin", 3073 + 10);
  r = run_qk("data cifar-info '" + dir.path() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("data_batch_2.bin is 3083 bytes, not a whole number of 3073-byte records"),
            std::string::npos)
      << r.output;

  r = run_qk("data synth-cifar --out '" + dir.path() + "' --num-train 4");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--num-train"), std::string::npos) << r.output;
  r = run_qk("data synth-cifar --num-train 10");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--out is required"), std::string::npos) << r.output;
}

TEST(DataCifarCli, DownloadRefusesABadArchiveAndLeavesNothing) {
  // A local file:// URL is not allowed (http/https only), and a dead local
  // port fails fast: both without touching the folder.
  TempDir dir("cli_cifar_dl");
  auto r = run_qk("data download-cifar --data-dir '" + (dir / "d") + "' --url file:///etc/passwd");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("expected an http:// or https:// URL"), std::string::npos) << r.output;
  r = run_qk("data download-cifar --data-dir '" + (dir / "d") + "' --stall-timeout 5", "QK_CIFAR10_URL=http://127.0.0.1:1/c.tar.gz no_proxy=127.0.0.1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("download of http://127.0.0.1:1/c.tar.gz failed"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir / "d"));
}

}  // namespace
