#include "qk/hpc/md/process_share.h"

#include "qk/dist/launch_env.h"
#include "qk/dist/process_group.h"

namespace qk::md {

ForceShare process_share() {
  ForceShare share;
  if (dist::launch_env().world_size <= 1) return share;
  if (!dist::is_initialized()) dist::init();
  share.rank = dist::rank();
  share.size = dist::world_size();
  share.allreduce_sum = [](double* data, int64_t count) {
    dist::group().all_reduce(from_blob(data, {count}, DType::f64));
  };
  // The step's sums as rank 0 has them: an all-reduce may add in an order that depends on the rank.
  share.broadcast_first = [](double* data, int64_t count) {
    dist::group().broadcast(from_blob(data, {count}, DType::f64), 0);
  };
  // Domain decomposition's halos: one send and one receive, together (either may be empty).
  share.exchange = [](int to, const double* send, int64_t send_count, int from, double* recv, int64_t recv_count) {
    std::vector<dist::P2POp> ops;
    if (send_count > 0)
      ops.push_back(dist::P2POp::send(from_blob(const_cast<double*>(send), {send_count}, DType::f64), to));
    if (recv_count > 0) ops.push_back(dist::P2POp::recv(from_blob(recv, {recv_count}, DType::f64), from));
    if (!ops.empty()) dist::group().batch_isend_irecv(ops)->wait();
  };
  return share;
}

}  // namespace qk::md
