// Unit tests of the pieces under the collectives: number formats and
// kernels, the unique id, addresses, the cost model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "qccl.h"
#include "algo/cost_model.h"
#include "bootstrap/bootstrap.h"
#include "core/reduce.h"
#include "core/settings.h"
#include "qk/base/env.h"

namespace qccl {
namespace {

TEST(Half, EveryNonNanValueRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): ties go to even (1).
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);  // overflow to inf
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
}

TEST(Bf16, RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);        // tie -> even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);    // tie -> even (up)
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  for (uint32_t h = 0; h < 65536; h += 7) {
    float f = bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f), h);
    }
  }
}

TEST(Reduce, HalfSumsInFloatAndRoundsOnce) {
  // 2048 + 1 is not a half; summed in f32 and rounded once it is 2048 (tie to even).
  uint16_t a = float_to_half(2048.0f), b = float_to_half(1.0f), out;
  reduce(&out, &a, &b, 1, qcclFloat16, qcclSum);
  EXPECT_EQ(half_to_float(out), 2048.0f);
  uint16_t c = float_to_half(3.0f);
  reduce(&out, &a, &c, 1, qcclFloat16, qcclSum);
  EXPECT_EQ(half_to_float(out), 2052.0f);  // 2051 -> nearest even representable
}

TEST(Reduce, MaxMinPropagateNan) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  float a[2] = {nan, 1.0f}, b[2] = {2.0f, nan}, out[2];
  reduce(out, a, b, 2, qcclFloat32, qcclMax);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  reduce(out, a, b, 2, qcclFloat32, qcclMin);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
}

TEST(Reduce, IntegersWrapAndAverageTruncates) {
  int8_t a = 100, b = 100, out;
  reduce(&out, &a, &b, 1, qcclInt8, qcclSum);
  EXPECT_EQ(out, static_cast<int8_t>(200));
  int32_t v = -7;
  finish_avg(&v, 1, qcclInt32, 2);
  EXPECT_EQ(v, -3);
}

TEST(Reduce, RejectsBadTypeAndOp) {
  int x = 0;
  EXPECT_THROW(reduce(&x, &x, &x, 1, static_cast<qcclDataType_t>(99), qcclSum), qk::ValueError);
  EXPECT_THROW(reduce(&x, &x, &x, 1, qcclInt32, static_cast<qcclRedOp_t>(9)), qk::ValueError);
  EXPECT_THROW(dtype_size(static_cast<qcclDataType_t>(-1)), qk::ValueError);
}

TEST(UniqueId, GarbageIdIsRejected) {
  qcclUniqueId id;
  std::memset(&id, 0x41, sizeof id);
  EXPECT_THROW(decode_unique_id(id), qk::ValueError);
  qcclComm_t comm = nullptr;
  EXPECT_EQ(qcclCommInitRank(&comm, 2, id, 0), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("qcclUniqueId"), std::string::npos);
}

TEST(UniqueId, RoundTripsAddressAndToken) {
  UniqueIdData d;
  d.root = SockAddr::parse("127.0.0.1:4242", "test");
  d.token = random_token();
  UniqueIdData back = decode_unique_id(encode_unique_id(d));
  EXPECT_EQ(back.root.str(), "127.0.0.1:4242");
  EXPECT_EQ(back.token, d.token);
}

TEST(SockAddr, BadAddressesSayWhatIsWrong) {
  EXPECT_THROW(SockAddr::parse("nohostport", "QCCL_COMM_ID"), qk::ValueError);
  EXPECT_THROW(SockAddr::parse("1.2.3.4:99999", "QCCL_COMM_ID"), qk::ValueError);
  try {
    SockAddr::parse("1.2.3.4:x", "QCCL_COMM_ID");
  } catch (const qk::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("QCCL_COMM_ID"), std::string::npos);
  }
}

TEST(CostModel, SmallMessagesUseRecursiveDoublingLargeUseRing) {
  CostModel shm = CostModel::for_transport("shm");
  // Tiny messages: all pairs up to 8 ranks (one latency), doubling from 16.
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 4, 64), Algo::kAllPairs);
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 8, 8), Algo::kAllPairs);
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 16, 64), Algo::kRecursiveDoubling);
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 2, 64), Algo::kRecursiveDoubling);
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 4, 16384), Algo::kRecursiveDoubling);
  EXPECT_EQ(choose(shm, "auto", Coll::kAllReduce, 4, 64 << 20), Algo::kRing);
  EXPECT_EQ(choose(shm, "auto", Coll::kBroadcast, 8, 8), Algo::kTree);
  EXPECT_EQ(choose(shm, "auto", Coll::kBroadcast, 8, 64 << 20), Algo::kChain);
  EXPECT_EQ(choose(shm, "ring", Coll::kAllReduce, 4, 8), Algo::kRing);
  // A forced algorithm that does not apply to the collective falls back to the model.
  EXPECT_EQ(choose(shm, "tree", Coll::kAllReduce, 4, 8), Algo::kAllPairs);
  EXPECT_THROW(choose(shm, "fastest", Coll::kAllReduce, 4, 8), qk::ValueError);
}

// `qk check --env` and docs/qccl.md show QCCL_ALGO's help: it names every algorithm.
TEST(CostModel, QcclAlgoHelpNamesEveryAlgorithm) {
  forced_algo();  // settings.cc, which declares the variable, is linked
  std::string help;
  for (const auto& v : qk::env::registered())
    if (std::string(v.name) == "QCCL_ALGO") help = v.help;
  ASSERT_FALSE(help.empty());
  for (const AlgoDesc& d : algorithms())
    EXPECT_NE(help.find(std::string(" ") + d.name), std::string::npos) << d.name << " missing from: " << help;
}

TEST(Api, InvalidArgumentsAreReportedWithAMessage) {
  qcclUniqueId id;
  ASSERT_EQ(qcclGetUniqueId(&id), qcclSuccess);
  qcclComm_t comm = nullptr;
  ASSERT_EQ(qcclCommInitRank(&comm, 1, id, 0), qcclSuccess) << qcclGetLastError(nullptr);
  float x = 1, y = 0;
  EXPECT_EQ(qcclAllReduce(&x, &y, 1, qcclFloat32, qcclSum, nullptr, nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclAllReduce(&x, &y, 1, static_cast<qcclDataType_t>(42), qcclSum, comm, nullptr),
            qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(comm)).find("qcclDataType_t"), std::string::npos);
  EXPECT_EQ(qcclAllReduce(&x, &y, 1, qcclFloat32, static_cast<qcclRedOp_t>(7), comm, nullptr),
            qcclInvalidArgument);
  EXPECT_EQ(qcclAllReduce(nullptr, &y, 1, qcclFloat32, qcclSum, comm, nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclBroadcast(&x, &y, 1, qcclFloat32, 1, comm, nullptr), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(comm)).find("root"), std::string::npos);
  EXPECT_EQ(qcclSend(&x, 1, qcclFloat32, 3, comm, nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclGroupEnd(), qcclInvalidUsage);
  qcclComm_t other = nullptr;
  EXPECT_EQ(qcclCommInitRank(&other, 2, id, 5), qcclInvalidArgument);
  EXPECT_EQ(other, nullptr);
  // The communicator still works after rejected calls; a 1-rank all-reduce copies.
  EXPECT_EQ(qcclAllReduce(&x, &y, 1, qcclFloat32, qcclAvg, comm, nullptr), qcclSuccess);
  EXPECT_EQ(y, 1.0f);
  int n = 0, r = -1, v = 0;
  EXPECT_EQ(qcclCommCount(comm, &n), qcclSuccess);
  EXPECT_EQ(qcclCommUserRank(comm, &r), qcclSuccess);
  EXPECT_EQ(n * 10 + r, 10);
  EXPECT_EQ(qcclGetVersion(&v), qcclSuccess);
  EXPECT_EQ(v, QCCL_VERSION_CODE);
  for (int c = 0; c <= qcclNumResults; ++c) EXPECT_NE(qcclGetErrorString(static_cast<qcclResult_t>(c)), nullptr);
  EXPECT_EQ(qcclCommDestroy(comm), qcclSuccess);
}

TEST(Api, BadConfigIsRejected) {
  qcclUniqueId id;
  ASSERT_EQ(qcclGetUniqueId(&id), qcclSuccess);
  qcclConfig_t cfg = QCCL_CONFIG_INITIALIZER;
  cfg.algo = "fastest";
  qcclComm_t comm = nullptr;
  EXPECT_EQ(qcclCommInitRankConfig(&comm, 1, id, 0, &cfg), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("QCCL_ALGO"), std::string::npos);
  qcclConfig_t raw;
  std::memset(&raw, 0, sizeof raw);
  EXPECT_EQ(qcclCommInitRankConfig(&comm, 1, id, 0, &raw), qcclInvalidArgument);
}

}  // namespace
}  // namespace qccl
