// Graph-safe random counters (graph_rng.h).
#include "graph_rng.h"

#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk {

namespace {
thread_local GraphRng* current = nullptr;
// The base is set with a fill of a double: exact up to 2^53 counters.
constexpr uint64_t kMaxExactOffset = uint64_t(1) << 53;
}  // namespace

GraphRngScope::GraphRngScope(GraphRng* rng) : prev_(current) { current = rng; }
GraphRngScope::~GraphRngScope() { current = prev_; }

GraphCounter graph_rng_counter(Generator& gen, uint64_t n, Device device) {
  QK_CHECK_AS(InternalError, current != nullptr, "graph_rng_counter: no graph capture on this thread records ",
              device.str());
  return current->draw(gen, n);
}

GraphCounter GraphRng::draw(Generator& gen, uint64_t n) {
  Used* u = nullptr;
  for (Used& e : used_)
    if (e.gen == &gen) u = &e;
  if (!u) {
    // empty(): no kernel, so nothing recorded resets the base after before_replay sets it.
    used_.push_back({&gen, gen.seed(), gen.offset(), 0,
                     qk::empty({1}, TensorOptions().dtype(DType::i64).device(device_))});
    u = &used_.back();
  }
  const uint64_t at = gen.advance(n);
  u->drawn = at + n - u->start;
  return {u->base, at - u->start};
}

void GraphRng::end() {
  for (Used& u : used_) u.gen->set_state(u.seed, u.start);
}

void GraphRng::before_replay() {
  for (Used& u : used_) {
    QK_CHECK_DEVICE(u.gen->seed() == u.seed, "a recorded graph's generator was reseeded (seed ", u.gen->seed(),
                    ", recorded with ", u.seed, "): its dropout would not draw the new seed's numbers; capture the "
                    "graph again");
    const uint64_t at = u.gen->advance(u.drawn);
    QK_CHECK_DEVICE(at < kMaxExactOffset, "a recorded graph's random counter passed 2^53; capture it again after "
                    "reseeding");
    ops::fill_(u.base, static_cast<double>(at));
  }
}

}  // namespace qk
