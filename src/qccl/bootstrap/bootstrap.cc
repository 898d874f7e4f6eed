#include "bootstrap/bootstrap.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "core/debug.h"
#include "core/settings.h"
#include "qk/base/env.h"

namespace qccl {

namespace {

QK_ENV_STRING(env_comm_id, "QCCL_COMM_ID", "",
              "host:port of the bootstrap root (as NCCL_COMM_ID); rank 0 listens there.");
QK_ENV_STRING(env_comm_token, "QCCL_COMM_TOKEN", "",
              "Job token (32 hex digits) used with QCCL_COMM_ID; empty: no token check.");

QK_ENV_STRING(env_host_id, "QCCL_HOST_ID", "",
              "Pretend to be on this host: ranks with different ids never share memory (testing).");

constexpr char kIdMagic[8] = {'Q', 'C', 'C', 'L', 'I', 'D', 0, 1};
constexpr uint32_t kWireMagic = 0x51434248;  // "QCBH"
constexpr uint16_t kWireVersion = 1;
constexpr int kMaxRanks = 1 << 16;

struct IdWire {
  char magic[8];
  uint32_t version;
  uint32_t ip;
  uint16_t port;
  uint16_t flags;  // bit 0: the root is started by rank 0 (QCCL_COMM_ID)
  uint8_t token[16];
};
static_assert(sizeof(IdWire) <= QCCL_UNIQUE_ID_BYTES);

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint8_t token[16];
  int32_t rank;
  int32_t nranks;
  PeerInfo info;
};

enum : uint16_t { kOk = 0, kRefused = 1, kTimedOut = 2 };
struct Reply {
  uint32_t magic;
  uint16_t version;
  uint16_t status;
  int32_t nranks;
  char msg[244];
};

Token token_from_hex(const std::string& s) {
  Token t{};
  QK_CHECK(s.size() == 32, "QCCL_COMM_TOKEN: expected 32 hex digits, got '", s, "'");
  for (size_t i = 0; i < 16; ++i) {
    unsigned v = 0;
    QK_CHECK(std::sscanf(s.c_str() + 2 * i, "%2x", &v) == 1, "QCCL_COMM_TOKEN: '", s,
             "' is not hex");
    t[i] = static_cast<uint8_t>(v);
  }
  return t;
}

std::string peer_of(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "unknown";
  SockAddr a;
  a.ip = sa.sin_addr.s_addr;
  a.port = ntohs(sa.sin_port);
  return a.str();
}

void reply(int fd, uint16_t status, int nranks, const std::string& msg) {
  Reply r{};
  r.magic = kWireMagic;
  r.version = kWireVersion;
  r.status = status;
  r.nranks = nranks;
  std::snprintf(r.msg, sizeof r.msg, "%s", msg.c_str());
  try {
    send_all(fd, &r, sizeof r, Deadline(2.0), "a joining rank");
  } catch (const std::exception&) {
    // Best effort: the other side may already be gone.
  }
}

// Why a hello is refused, or "" when it is fine.
std::string check_hello(const Hello& h, const Token& token, int nranks,
                        const std::vector<bool>& joined) {
  if (h.magic != kWireMagic) return "not a qccl bootstrap hello (bad magic)";
  if (h.version != kWireVersion)
    return fmt::format("bootstrap version {} where {} was expected (mixed qccl builds?)", h.version,
                       kWireVersion);
  if (std::memcmp(h.token, token.data(), token.size()) != 0)
    return "wrong job token (this process does not hold this job's qcclUniqueId)";
  if (h.nranks < 1 || h.nranks > kMaxRanks)
    return fmt::format("nranks {} outside [1, {}]", h.nranks, kMaxRanks);
  if (nranks >= 0 && h.nranks != nranks)
    return fmt::format("rank {} says nranks={} but earlier ranks said {}", h.rank, h.nranks, nranks);
  if (h.rank < 0 || h.rank >= h.nranks)
    return fmt::format("rank {} outside [0, {})", h.rank, h.nranks);
  if (nranks >= 0 && joined[h.rank]) return fmt::format("rank {} joined twice", h.rank);
  return "";
}

void root_main(Fd listen, Token token, double timeout_s) {
  Deadline dl(timeout_s);
  int nranks = -1, joined_count = 0;
  std::vector<Fd> conns;
  std::vector<PeerInfo> infos;
  std::vector<bool> joined;
  while (nranks < 0 || joined_count < nranks) {
    Fd c = accept_until(listen.get(), dl);
    if (!c) break;
    std::string from = peer_of(c.get());
    Hello h{};
    try {
      recv_all(c.get(), &h, sizeof h, Deadline(std::min(5.0, std::max(0.1, dl.remaining_seconds()))),
               "connecting process " + from);
    } catch (const std::exception& e) {
      QCCL_WARN("INIT", "bootstrap root: refused {}: {}", from, e.what());
      continue;
    }
    std::string why = check_hello(h, token, nranks, joined);
    if (!why.empty()) {
      QCCL_WARN("INIT", "bootstrap root: refused {}: {}", from, why);
      reply(c.get(), kRefused, nranks, "refused: " + why);
      continue;
    }
    if (nranks < 0) {
      nranks = h.nranks;
      conns.resize(nranks);
      infos.resize(nranks);
      joined.assign(nranks, false);
    }
    QCCL_TRACE("INIT", "bootstrap root: rank {} of {} joined from {}", h.rank, nranks, from);
    conns[h.rank] = std::move(c);
    infos[h.rank] = h.info;
    joined[h.rank] = true;
    ++joined_count;
  }
  if (nranks < 0 || joined_count < nranks) {
    std::string missing;
    for (int r = 0; r < nranks; ++r)
      if (!joined[r]) missing += fmt::format("{}{}", missing.empty() ? "" : ",", r);
    std::string msg = fmt::format(
        "bootstrap timed out after {} s: {} never joined (did they start, with the same "
        "qcclUniqueId?)",
        timeout_s, nranks < 0 ? std::string("no rank") : "ranks " + missing);
    QCCL_WARN("INIT", "{}", msg);
    for (auto& c : conns)
      if (c) reply(c.get(), kTimedOut, nranks, msg);
    return;
  }
  for (int r = 0; r < nranks; ++r) {
    reply(conns[r].get(), kOk, nranks, "");
    try {
      send_all(conns[r].get(), infos.data(), sizeof(PeerInfo) * nranks, Deadline(10.0),
               "rank " + std::to_string(r));
    } catch (const std::exception& e) {
      QCCL_WARN("INIT", "bootstrap root: rank {} left before it got the table: {}", r, e.what());
    }
  }
}

}  // namespace

UniqueIdData decode_unique_id(const qcclUniqueId& id) {
  IdWire w;
  std::memcpy(&w, id.internal, sizeof w);
  QK_CHECK(std::memcmp(w.magic, kIdMagic, sizeof kIdMagic) == 0,
           "Expected a qcclUniqueId made by qcclGetUniqueId, got bytes without its magic "
           "(uninitialised or corrupted id?)");
  QK_CHECK(w.version == kWireVersion, "qcclUniqueId has version ", w.version, ", expected ",
           kWireVersion, " (made by a different qccl build?)");
  UniqueIdData d;
  d.root.ip = w.ip;
  d.root.port = w.port;
  std::memcpy(d.token.data(), w.token, 16);
  return d;
}

qcclUniqueId encode_unique_id(const UniqueIdData& d) {
  qcclUniqueId id;
  std::memset(&id, 0, sizeof id);
  IdWire w{};
  std::memcpy(w.magic, kIdMagic, sizeof kIdMagic);
  w.version = kWireVersion;
  w.ip = d.root.ip;
  w.port = d.root.port;
  std::memcpy(w.token, d.token.data(), 16);
  std::memcpy(id.internal, &w, sizeof w);
  return id;
}

bool id_needs_root(const qcclUniqueId& id) {
  IdWire w;
  std::memcpy(&w, id.internal, sizeof w);
  return (w.flags & 1) != 0;
}

Token random_token() {
  Token t{};
  size_t got = 0;
  while (got < t.size()) {
    ssize_t k = ::getrandom(t.data() + got, t.size() - got, 0);
    if (k < 0 && errno == EINTR) continue;
    QK_CHECK_AS(qk::IoError, k > 0, "getrandom failed: ", qk::detail::errno_string(errno));
    got += static_cast<size_t>(k);
  }
  return t;
}

uint64_t host_hash() {
  // Read when a communicator is created, so a test can give each rank its own.
  std::string forced = env_host_id.reload();
  if (!forced.empty()) return std::hash<std::string>{}("id|" + forced);
  char name[256] = {0};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::hash<std::string>{}(std::string(name) + "|" + boot);
}

SockAddr start_root(SockAddr addr, const Token& token, double timeout_s) {
  SockAddr bound;
  Fd listen = listen_on(addr, &bound);
  std::thread(root_main, std::move(listen), token, timeout_s).detach();
  QCCL_INFO("INIT", "bootstrap root listening on {}", bound.str());
  return bound;
}

qcclUniqueId make_unique_id() {
  std::string comm_id = env_comm_id.reload();  // per call: tests and launchers set it late
  if (!comm_id.empty()) {
    UniqueIdData d;
    d.root = SockAddr::parse(comm_id, "QCCL_COMM_ID");
    std::string tok = env_comm_token.reload();
    if (!tok.empty()) d.token = token_from_hex(tok);
    qcclUniqueId id = encode_unique_id(d);
    IdWire w;
    std::memcpy(&w, id.internal, sizeof w);
    w.flags |= 1;
    std::memcpy(id.internal, &w, sizeof w);
    return id;
  }
  UniqueIdData d;
  d.token = random_token();
  SockAddr here = local_address();
  d.root = start_root(here, d.token, default_timeout_s());
  return encode_unique_id(d);
}

std::vector<PeerInfo> join(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me,
                           const Deadline& dl) {
  std::string who = "bootstrap root " + id.root.str();
  Fd fd = connect_to(id.root, dl, who);
  Hello h{};
  h.magic = kWireMagic;
  h.version = kWireVersion;
  std::memcpy(h.token, id.token.data(), 16);
  h.rank = rank;
  h.nranks = nranks;
  h.info = me;
  send_all(fd.get(), &h, sizeof h, dl, who);
  Reply r{};
  recv_all(fd.get(), &r, sizeof r, dl, who);
  r.msg[sizeof r.msg - 1] = '\0';
  QK_CHECK_AS(RemoteError, r.magic == kWireMagic && r.version == kWireVersion, who,
              " answered with bytes that are not a qccl bootstrap reply");
  if (r.status == kTimedOut) QK_THROW(qk::TimeoutError, who, ": ", r.msg);
  QK_CHECK_AS(RemoteError, r.status == kOk, who, " refused rank ", rank, ": ", r.msg);
  QK_CHECK_AS(RemoteError, r.nranks == nranks, who, " sent a table for ", r.nranks,
              " ranks, expected ", nranks);
  std::vector<PeerInfo> table(nranks);
  recv_all(fd.get(), table.data(), sizeof(PeerInfo) * nranks, dl, who);
  for (auto& p : table) p.host[sizeof p.host - 1] = '\0';
  return table;
}

}  // namespace qccl
