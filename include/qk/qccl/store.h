// A TCP key-value store for rendezvous (torch's TCPStore, in small): the
// launcher (`qk run`) hosts one on node 0, and every process of a job meets
// there to exchange what it needs before the fast paths exist (qccl's unique
// id, each agent's node, a failure flag for the restart protocol).
//
//   qk::qccl::StoreServer server(0, token);             // port 0: any free port
//   qk::qccl::Store store("10.0.0.1", server.port(), token, /*timeout_s=*/30);
//   store.set("id", bytes);
//   std::string v = store.get("id");                     // waits until set, or throws
//   int64_t n = store.add("arrived", 1);                 // atomic counter
//   store.wait({"rank/0", "rank/1"});                    // TimeoutError names the missing keys
//
//   auto comm = qk::qccl::init_from_store(store, nranks, rank);   // rank 0 publishes the id
//
// Every connection first presents the job token; a stranger is refused and a
// connection that sends malformed frames (bad magic, absurd lengths) is
// closed, and the server goes on serving the others. Every wait has a
// deadline: the server answers a wait that runs out with the keys still
// missing, and the client gives up on its own if the server does not answer.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "qk/qccl/communicator.h"

namespace qk::qccl {

// Serves the store from one thread (poll over non-blocking sockets) until destroyed.
class StoreServer {
 public:
  // Listens on `host:port` ("" or "0.0.0.0": all interfaces; port 0: any free
  // port). Clients must present `token` (any string up to 256 bytes).
  StoreServer(uint16_t port, std::string token, const std::string& host = "");
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const;
  // Connections refused so far (wrong token or malformed bytes); for tests and logs.
  int64_t refused() const;
  // Blocks until no client is in a wait (each got its answer or timed out), at
  // most max_s. A process that hosts the store and is about to exit after a
  // failed rendezvous calls it, so the others get their own clear error
  // rather than a closed connection.
  void drain(double max_s);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A client connection. Thread-safe: calls from several threads are serialised.
class Store {
 public:
  // Connects (retrying until timeout_s while the server is not up yet) and
  // presents the token. timeout_s is also the default deadline of get/wait.
  Store(const std::string& host, uint16_t port, const std::string& token, double timeout_s = 300);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until the key exists (default deadline: the constructor's timeout).
  std::string get(const std::string& key, double timeout_s = -1);
  // The value if the key exists now; never waits.
  std::optional<std::string> try_get(const std::string& key);
  // Adds delta to the integer stored at key (missing: 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Waits until every key exists; TimeoutError lists the ones still missing.
  void wait(const std::vector<std::string>& keys, double timeout_s = -1);
  // True when every key exists now.
  bool check(const std::vector<std::string>& keys);
  // Removes a key; true when it existed.
  bool remove(const std::string& key);

  double timeout_s() const { return timeout_s_; }
  const std::string& address() const { return addr_; }  // "host:port", for messages

 private:
  struct Reply;
  Reply call(uint8_t op, const std::vector<std::string>& args, double wait_s);
  std::mutex mu_;
  int fd_ = -1;
  std::string addr_;
  double timeout_s_;
};

// A fresh job token (32 hex digits from the kernel's random source), for a
// StoreServer and the clients that will meet there (`qk run` makes one per job).
std::string random_store_token();

// The keys a wait found missing, from a TimeoutError thrown by Store::wait:
// the message ends with "missing keys: a, b, c".
std::vector<std::string> missing_keys_of(const std::string& message);

// Rendezvous of a communicator through a store: every rank announces itself
// under `prefix`/arrived/<rank>, rank 0 creates the qcclUniqueId (starting the
// bootstrap root in this process) and publishes it under `prefix`/id, the
// others fetch it. A rank that never arrives makes every other rank fail
// with a TimeoutError naming it. Use a fresh prefix per communicator (and per
// restart of a job).
qcclUniqueId exchange_unique_id(Store& store, int nranks, int rank, const std::string& prefix = "qccl",
                                double timeout_s = -1);
std::unique_ptr<Communicator> init_from_store(Store& store, int nranks, int rank,
                                              const CommOptions& opts = {},
                                              const std::string& prefix = "qccl");

}  // namespace qk::qccl
