// The rendezvous key-value store: wire format, server (one thread polling
// every connection) and client.
#include "bootstrap/store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <list>
#include <map>
#include <thread>

#include "bootstrap/socket.h"
#include "core/debug.h"
#include "core/errors.h"
#include "qk/base/error.h"
#include "qk/qccl/store.h"

namespace qk::qccl {

// ---- wire format -------------------------------------------------------------
namespace store_wire {

namespace {
void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
uint32_t get_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
}  // namespace

std::string encode(uint8_t code, const std::vector<std::string>& args) {
  size_t payload = 0;
  for (const auto& a : args) payload += 4 + a.size();
  QK_CHECK(args.size() <= kMaxArgs && payload <= kMaxPayload, "store: a request of ", args.size(),
           " keys and ", payload, " bytes is larger than the store accepts (", kMaxArgs, " keys, ",
           kMaxPayload, " bytes)");
  std::string s;
  s.reserve(kHeaderBytes + payload);
  put_u32(s, kMagic);
  s.push_back(static_cast<char>(code));
  s.append(3, '\0');
  put_u32(s, static_cast<uint32_t>(args.size()));
  put_u32(s, static_cast<uint32_t>(payload));
  for (const auto& a : args) {
    put_u32(s, static_cast<uint32_t>(a.size()));
    s += a;
  }
  return s;
}

size_t decode(const std::string& buf, Frame* out) {
  if (buf.size() < kHeaderBytes) return 0;
  const char* p = buf.data();
  uint32_t magic = get_u32(p), nargs = get_u32(p + 8), payload = get_u32(p + 12);
  QK_CHECK(magic == kMagic, "bad magic 0x", std::hex, magic, " (not a qk store client)");
  QK_CHECK(p[5] == 0 && p[6] == 0 && p[7] == 0, "bad header padding");
  QK_CHECK(nargs <= kMaxArgs, "frame claims ", nargs, " arguments (at most ", kMaxArgs, ")");
  QK_CHECK(payload <= kMaxPayload, "frame claims ", payload, " bytes (at most ", kMaxPayload, ")");
  QK_CHECK(payload >= 4ull * nargs, "frame of ", payload, " bytes cannot hold ", nargs, " arguments");
  if (buf.size() < kHeaderBytes + payload) return 0;
  out->code = static_cast<uint8_t>(p[4]);
  out->args.clear();
  size_t off = kHeaderBytes, end = kHeaderBytes + payload;
  for (uint32_t i = 0; i < nargs; ++i) {
    QK_CHECK(end - off >= 4, "argument ", i, " runs past the frame");
    uint32_t len = get_u32(p + off);
    off += 4;
    QK_CHECK(len <= end - off, "argument ", i, " claims ", len, " bytes, only ", end - off, " left");
    out->args.emplace_back(p + off, len);
    off += len;
  }
  QK_CHECK(off == end, "frame has ", end - off, " trailing bytes");
  return end;
}

}  // namespace store_wire

namespace wire = store_wire;
using Clock = std::chrono::steady_clock;

// ---- server ------------------------------------------------------------------
namespace {

struct Client {
  ::qccl::Fd fd;
  std::string peer;
  std::string in, out;
  bool authed = false;
  bool closing = false;  // close once `out` is sent
  Clock::time_point hello_deadline;
  bool waiting = false;
  std::vector<std::string> wait_keys;
  Clock::time_point wait_deadline;
};

std::string peer_name(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "unknown peer";
  ::qccl::SockAddr a;
  a.ip = sa.sin_addr.s_addr;
  a.port = ntohs(sa.sin_port);
  return a.str();
}

int64_t parse_i64(const std::string& s, const char* what) {
  QK_CHECK(!s.empty() && s.size() < 24, what, ": expected an integer, got '", s, "'");
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  QK_CHECK(errno == 0 && *end == '\0', what, ": expected an integer, got '", s, "'");
  return v;
}

}  // namespace

struct StoreServer::Impl {
  std::string token;
  ::qccl::Fd listen;
  uint16_t port = 0;
  int wake[2] = {-1, -1};
  std::atomic<bool> stop{false};
  std::atomic<int64_t> refused{0};
  std::atomic<int> waiting{0};  // clients in a wait, for drain()
  std::map<std::string, std::string> kv;
  std::list<Client> clients;
  std::thread thread;

  void reply(Client& c, uint8_t status, const std::vector<std::string>& args = {}) {
    c.out += wire::encode(status, args);
  }

  void refuse(Client& c, const std::string& why) {
    QCCL_WARN("INIT", "store on port {}: refused {}: {}", port, c.peer, why);
    ++refused;
    reply(c, wire::kError, {"refused: " + why});
    c.closing = true;
  }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> m;
    for (const auto& k : keys)
      if (!kv.count(k)) m.push_back(k);
    return m;
  }

  // Answers the waits that the last change satisfied.
  void wake_waiters() {
    for (auto& c : clients)
      if (c.waiting && missing(c.wait_keys).empty()) {
        c.waiting = false;
        reply(c, wire::kOk);
      }
  }

  void handle(Client& c, wire::Frame& f) {
    if (!c.authed) {
      if (f.code != wire::kHello || f.args.size() != 1) return refuse(c, "the first message was not a hello");
      if (f.args[0] != token) return refuse(c, "wrong job token (is QK_STORE_TOKEN the same on every node?)");
      c.authed = true;
      return reply(c, wire::kOk);
    }
    auto need = [&](size_t n, const char* what) {
      QK_CHECK(f.args.size() == n, what, " expects ", n, " arguments, got ", f.args.size());
    };
    switch (f.code) {
      case wire::kSet:
        need(2, "set");
        kv[f.args[0]] = std::move(f.args[1]);
        reply(c, wire::kOk);
        wake_waiters();
        return;
      case wire::kGet: {
        need(1, "get");
        auto it = kv.find(f.args[0]);
        if (it == kv.end()) return reply(c, wire::kNotFound);
        return reply(c, wire::kOk, {it->second});
      }
      case wire::kAdd: {
        need(2, "add");
        int64_t delta = parse_i64(f.args[1], "add: delta");
        auto it = kv.find(f.args[0]);
        int64_t v = it == kv.end() ? 0 : parse_i64(it->second, "add: stored value");
        v += delta;
        kv[f.args[0]] = std::to_string(v);
        reply(c, wire::kOk, {std::to_string(v)});
        wake_waiters();
        return;
      }
      case wire::kWait: {
        QK_CHECK(!f.args.empty(), "wait expects a timeout");
        int64_t ms = parse_i64(f.args[0], "wait: timeout_ms");
        std::vector<std::string> keys(f.args.begin() + 1, f.args.end());
        if (missing(keys).empty()) return reply(c, wire::kOk);
        c.waiting = true;
        c.wait_keys = std::move(keys);
        c.wait_deadline = Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(ms, 0, 86400000));
        return;
      }
      case wire::kCheck: {
        std::vector<std::string> keys(f.args.begin(), f.args.end());
        return reply(c, missing(keys).empty() ? wire::kOk : wire::kNotFound);
      }
      case wire::kDelete:
        need(1, "delete");
        return reply(c, kv.erase(f.args[0]) ? wire::kOk : wire::kNotFound);
      default:
        QK_THROW(ValueError, "unknown request code ", int(f.code));
    }
  }

  // Runs the complete frames buffered for a client; false: drop the client.
  bool process(Client& c) {
    while (!c.waiting && !c.closing) {
      wire::Frame f;
      size_t used;
      try {
        used = wire::decode(c.in, &f);
        if (used == 0) {
          QK_CHECK(c.in.size() <= wire::kHeaderBytes + wire::kMaxPayload, "oversized frame");
          return true;
        }
        c.in.erase(0, used);
        handle(c, f);
      } catch (const std::exception& e) {
        // Garbage: say why (best effort) and drop the connection; the store goes on.
        if (!c.authed) ++refused;
        QCCL_WARN("INIT", "store on port {}: dropping {}: malformed request: {}", port, c.peer, e.what());
        reply(c, wire::kError, {std::string("malformed request: ") + e.what()});
        c.closing = true;
      }
    }
    return true;
  }

  // Returns false when the connection is finished.
  bool on_readable(Client& c) {
    char buf[65536];
    while (true) {
      ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (k > 0) {
        c.in.append(buf, static_cast<size_t>(k));
        if (c.in.size() > wire::kHeaderBytes + wire::kMaxPayload + sizeof buf) break;
        continue;
      }
      if (k == 0) return false;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    return process(c);
  }

  bool on_writable(Client& c) {
    while (!c.out.empty()) {
      ssize_t k = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        c.out.erase(0, static_cast<size_t>(k));
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
    return !c.closing;
  }

  void loop() {
    std::vector<pollfd> pfds;
    std::vector<Client*> order;
    while (!stop.load()) {
      pfds.clear();
      order.clear();
      pfds.push_back({listen.get(), POLLIN, 0});
      pfds.push_back({wake[0], POLLIN, 0});
      auto now = Clock::now();
      auto next = now + std::chrono::milliseconds(200);
      for (auto& c : clients) {
        short ev = POLLIN;
        if (!c.out.empty()) ev |= POLLOUT;
        pfds.push_back({c.fd.get(), ev, 0});
        order.push_back(&c);
        if (c.waiting) next = std::min(next, c.wait_deadline);
        if (!c.authed) next = std::min(next, c.hello_deadline);
      }
      int ms = static_cast<int>(
          std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
      int n = ::poll(pfds.data(), pfds.size(), ms);
      if (n < 0 && errno != EINTR) {
        QCCL_WARN("INIT", "store on port {}: poll failed: {}", port, qk::detail::errno_string(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (pfds[0].revents & POLLIN) accept_all();
      std::vector<Client*> dead;
      for (size_t i = 0; n > 0 && i < order.size(); ++i) {
        Client& c = *order[i];
        short re = pfds[i + 2].revents;
        bool alive = true;
        if (re & (POLLIN | POLLHUP | POLLERR)) alive = on_readable(c);
        if (alive && !c.out.empty()) alive = on_writable(c);
        else if (alive && c.closing) alive = false;
        if (!alive) dead.push_back(&c);
      }
      // Deadlines: waits that ran out, hellos that never came.
      now = Clock::now();
      for (auto& c : clients) {
        if (c.waiting && now >= c.wait_deadline) {
          c.waiting = false;
          reply(c, wire::kTimeout, missing(c.wait_keys));
        }
        if (!c.authed && !c.closing && now >= c.hello_deadline) refuse(c, "no hello within 10 s");
        // Frames that arrived while the client waited.
        if (!c.waiting && !c.closing && !c.in.empty()) process(c);
        if (!c.out.empty() && !on_writable(c)) dead.push_back(&c);
      }
      std::sort(dead.begin(), dead.end());
      dead.erase(std::unique(dead.begin(), dead.end()), dead.end());
      clients.remove_if([&](const Client& c) {
        return std::find(dead.begin(), dead.end(), &c) != dead.end();
      });
      int w = 0;
      for (const auto& c : clients) w += c.waiting;
      waiting.store(w);
    }
  }

  void accept_all() {
    while (true) {
      int fd = ::accept4(listen.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;  // EAGAIN, or a connection that vanished
      ::qccl::set_nodelay(fd);
      Client c;
      c.fd.reset(fd);
      c.peer = peer_name(fd);
      c.hello_deadline = Clock::now() + std::chrono::seconds(10);
      clients.push_back(std::move(c));
    }
  }
};

StoreServer::StoreServer(uint16_t port, std::string token, const std::string& host)
    : impl_(std::make_unique<Impl>()) {
  QK_CHECK(token.size() <= wire::kMaxToken, "store token: at most ", wire::kMaxToken, " bytes, got ",
           token.size());
  impl_->token = std::move(token);
  ::qccl::SockAddr addr;
  if (!host.empty() && host != "0.0.0.0") addr = ::qccl::SockAddr::parse(host + ":1", "store host");
  addr.port = port;
  ::qccl::SockAddr bound;
  try {
    impl_->listen = ::qccl::listen_on(addr, &bound);
  } catch (const qk::IoError& e) {
    QK_THROW(IoError, "store: cannot listen on ", addr.str(), ": ", e.message(),
             port ? " (is another job using this port? pick another --master-port)" : "");
  }
  impl_->port = bound.port;
  QK_SYSCALL(::pipe2(impl_->wake, O_CLOEXEC | O_NONBLOCK));
  QCCL_INFO("INIT", "store listening on {}", bound.str());
  impl_->thread = std::thread([p = impl_.get()] { p->loop(); });
}

StoreServer::~StoreServer() {
  impl_->stop.store(true);
  char b = 1;
  [[maybe_unused]] ssize_t k = ::write(impl_->wake[1], &b, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

uint16_t StoreServer::port() const { return impl_->port; }
int64_t StoreServer::refused() const { return impl_->refused.load(); }

void StoreServer::drain(double max_s) {
  auto end = Clock::now() + std::chrono::duration<double>(max_s);
  // One loop turn first, so a wait that arrived just now is counted.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  while (impl_->waiting.load() > 0 && Clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// ---- client ------------------------------------------------------------------
struct Store::Reply {
  uint8_t status = 0;
  std::vector<std::string> args;
};

Store::Store(const std::string& host, uint16_t port, const std::string& token, double timeout_s)
    : timeout_s_(timeout_s) {
  ::qccl::SockAddr a = ::qccl::SockAddr::parse(host + ":" + std::to_string(port), "store address");
  addr_ = host + ":" + std::to_string(port);
  ::qccl::Deadline dl(timeout_s);
  fd_ = ::qccl::connect_to(a, dl, "the store").release();
  Reply r = call(wire::kHello, {token}, 0);
  if (r.status != wire::kOk) {
    ::close(fd_);
    fd_ = -1;
    QK_THROW(IoError, "store at ", addr_, " refused this process: ",
             r.args.empty() ? std::string("no reason given") : r.args[0]);
  }
}

Store::~Store() {
  if (fd_ >= 0) ::close(fd_);
}

Store::Reply Store::call(uint8_t op, const std::vector<std::string>& args, double wait_s) {
  std::lock_guard<std::mutex> g(mu_);
  QK_CHECK_AS(IoError, fd_ >= 0, "store at ", addr_, ": connection already failed");
  std::string who = "the store at " + addr_;
  // The server answers a wait itself when it runs out; our own deadline only
  // covers a server that died or hangs.
  ::qccl::Deadline dl(std::max(timeout_s_, wait_s + 10.0));
  try {
    std::string req = wire::encode(op, args);
    ::qccl::send_all(fd_, req.data(), req.size(), dl, who);
    std::string buf(wire::kHeaderBytes, '\0');
    ::qccl::recv_all(fd_, buf.data(), wire::kHeaderBytes, dl, who);
    uint32_t payload;
    std::memcpy(&payload, buf.data() + 12, 4);
    QK_CHECK_AS(IoError, payload <= wire::kMaxPayload, who, " sent a reply of ", payload, " bytes");
    buf.resize(wire::kHeaderBytes + payload);
    ::qccl::recv_all(fd_, buf.data() + wire::kHeaderBytes, payload, dl, who);
    wire::Frame f;
    QK_CHECK_AS(IoError, wire::decode(buf, &f) == buf.size(), who, " sent a malformed reply");
    return Reply{f.code, std::move(f.args)};
  } catch (...) {
    // Out of step with the server now: later calls must not read a stale reply.
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

void Store::set(const std::string& key, const std::string& value) {
  Reply r = call(wire::kSet, {key, value}, 0);
  QK_CHECK_AS(IoError, r.status == wire::kOk, "store set '", key, "' failed: ",
              r.args.empty() ? "" : r.args[0]);
}

std::optional<std::string> Store::try_get(const std::string& key) {
  Reply r = call(wire::kGet, {key}, 0);
  if (r.status == wire::kNotFound) return std::nullopt;
  QK_CHECK_AS(IoError, r.status == wire::kOk && r.args.size() == 1, "store get '", key, "' failed: ",
              r.args.empty() ? "" : r.args[0]);
  return r.args[0];
}

std::string Store::get(const std::string& key, double timeout_s) {
  wait({key}, timeout_s);
  auto v = try_get(key);
  QK_CHECK_AS(IoError, v.has_value(), "store key '", key, "' vanished right after it was set (deleted?)");
  return *v;
}

int64_t Store::add(const std::string& key, int64_t delta) {
  Reply r = call(wire::kAdd, {key, std::to_string(delta)}, 0);
  QK_CHECK_AS(IoError, r.status == wire::kOk && r.args.size() == 1, "store add '", key, "' failed: ",
              r.args.empty() ? "" : r.args[0]);
  return parse_i64(r.args[0], "store add reply");
}

void Store::wait(const std::vector<std::string>& keys, double timeout_s) {
  if (timeout_s < 0) timeout_s = timeout_s_;
  std::vector<std::string> args{std::to_string(static_cast<int64_t>(timeout_s * 1e3))};
  args.insert(args.end(), keys.begin(), keys.end());
  Reply r = call(wire::kWait, args, timeout_s);
  if (r.status == wire::kOk) return;
  if (r.status == wire::kTimeout) {
    std::string list;
    for (const auto& k : r.args) list += (list.empty() ? "" : ", ") + k;
    QK_THROW(TimeoutError, "store at ", addr_, ": waited ", timeout_s, " s; missing keys: ", list);
  }
  QK_THROW(IoError, "store wait failed: ", r.args.empty() ? "" : r.args[0]);
}

bool Store::check(const std::vector<std::string>& keys) {
  Reply r = call(wire::kCheck, keys, 0);
  QK_CHECK_AS(IoError, r.status == wire::kOk || r.status == wire::kNotFound, "store check failed: ",
              r.args.empty() ? "" : r.args[0]);
  return r.status == wire::kOk;
}

bool Store::remove(const std::string& key) {
  Reply r = call(wire::kDelete, {key}, 0);
  QK_CHECK_AS(IoError, r.status == wire::kOk || r.status == wire::kNotFound, "store delete failed: ",
              r.args.empty() ? "" : r.args[0]);
  return r.status == wire::kOk;
}

std::vector<std::string> missing_keys_of(const std::string& message) {
  std::vector<std::string> keys;
  const std::string tag = "missing keys: ";
  auto pos = message.find(tag);
  if (pos == std::string::npos) return keys;
  std::string rest = message.substr(pos + tag.size());
  auto stop = rest.find(" (at ");  // qk::Error appends the location
  if (stop != std::string::npos) rest.resize(stop);
  size_t start = 0;
  while (start <= rest.size()) {
    auto comma = rest.find(", ", start);
    std::string k = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!k.empty()) keys.push_back(k);
    if (comma == std::string::npos) break;
    start = comma + 2;
  }
  return keys;
}

}  // namespace qk::qccl
