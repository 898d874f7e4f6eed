// The key-value store's wire format, shared by the server and the client
// (the API is in include/qk/qccl/store.h).
//
// Every message, in both directions, is one frame:
//   header (16 bytes): magic "QKS1", op or status (1 byte), 3 zero bytes,
//                      nargs (u32), payload bytes (u32)
//   payload:           nargs x (u32 length, bytes)
// All integers little-endian (host order on the x86/arm hosts we run on).
// The first frame of a connection is kHello with the job token; the server
// answers kOk or kError and then closes. Limits are checked before anything
// is allocated, so garbage cannot make either side allocate gigabytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace qk::qccl::store_wire {

inline constexpr uint32_t kMagic = 0x31534b51;  // "QKS1"
inline constexpr size_t kHeaderBytes = 16;
inline constexpr uint32_t kMaxArgs = 4096;
inline constexpr uint32_t kMaxPayload = 64u << 20;
inline constexpr size_t kMaxToken = 256;

// Requests.
enum Op : uint8_t {
  kHello = 1,   // token
  kSet = 2,     // key, value
  kGet = 3,     // key                 -> kOk value | kNotFound
  kAdd = 4,     // key, delta (decimal) -> kOk new value (decimal)
  kWait = 5,    // timeout_ms (decimal), keys... -> kOk | kTimeout missing keys...
  kCheck = 6,   // keys...             -> kOk | kNotFound
  kDelete = 7,  // key                 -> kOk | kNotFound
};
// Replies.
enum Status : uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kError = 3 };

struct Frame {
  uint8_t code = 0;
  std::vector<std::string> args;
};

std::string encode(uint8_t code, const std::vector<std::string>& args);

// Parses one frame from the front of `buf`. Returns the bytes it used (0: the
// frame is not complete yet). Throws ValueError on malformed bytes.
size_t decode(const std::string& buf, Frame* out);

}  // namespace qk::qccl::store_wire
