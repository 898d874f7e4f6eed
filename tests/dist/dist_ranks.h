// Forked ranks that form a qk::dist process group through a store in the
// parent, as under `qk run`. The parent must not compute with tensors: GNU
// OpenMP (oneDNN's runtime) does not survive fork() once its threads exist,
// so references are computed in the ranks.
#pragma once

#include <cstdlib>
#include <string>

#include "qccl/ranks.h"
#include "qk/dist/process_group.h"
#include "qk/qccl/store.h"

namespace qk_dist_test {

template <typename F>
qccl_test::Result on_ranks(int n, const std::string& token, F body) {
  qk::qccl::StoreServer server(0, token);
  int port = server.port();
  return qccl_test::run_ranks(n, [port, n, &token, &body](const qccl_test::Rank& me) {
    ::setenv("RANK", std::to_string(me.rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    ::setenv("QK_STORE_TOKEN", token.c_str(), 1);
    ::setenv("QK_RUN", "1", 1);
    qk::dist::init(qk::dist::InitOptions().timeout(30));
    body(me, qk::dist::group());
    qk::dist::destroy();
  });
}

}  // namespace qk_dist_test
