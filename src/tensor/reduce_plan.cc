// The split of a device reduction (reduce_plan.h).
#include "reduce_plan.h"

#include <algorithm>

namespace qk {

std::optional<ReduceShape> reduce_as_middle(const std::vector<int64_t>& shape, const std::vector<int64_t>& dims) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t d : dims) reduced[d] = true;
  // The first and last reduced dims that are not of size 1; between them
  // every dim (of size > 1) must be reduced.
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d] && shape[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  ReduceShape r;
  if (first < 0) {  // only dims of size 1 (or none) reduced: n is 1
    for (int64_t d = 0; d < rank; ++d) r.outer *= shape[d];
    return r;
  }
  for (int64_t d = first; d <= last; ++d)
    if (!reduced[d] && shape[d] != 1) return std::nullopt;
  for (int64_t d = 0; d < first; ++d) r.outer *= shape[d];
  r.n = 1;
  for (int64_t d = first; d <= last; ++d) r.n *= shape[d];
  for (int64_t d = last + 1; d < rank; ++d) r.inner *= shape[d];
  return r;
}

ReducePlan plan_reduce(const ReduceShape& s, int64_t multiprocessors) {
  constexpr int64_t kMaxSplits = 1024;
  const bool rows = s.inner == 1;
  const int64_t tiles = rows ? 1 : (s.inner + kReduceTileCols - 1) / kReduceTileCols;
  const int64_t base = s.outer * tiles;  // blocks with one part per output
  // Each thread of a part reduces at least 16 elements.
  const int64_t min_span = 16 * (rows ? kReduceBlockThreads : kReduceTileRows);
  const int64_t target = 4 * std::max<int64_t>(multiprocessors, 1);
  int64_t splits = 1;
  if (base > 0 && base < target && s.n > min_span) {
    const int64_t by_size = (s.n + min_span - 1) / min_span;
    const int64_t by_device = (target + base - 1) / base;
    splits = std::clamp<int64_t>(std::min(by_size, by_device), 1, kMaxSplits);
  }
  ReducePlan p;
  p.span = (s.n + splits - 1) / splits;
  p.splits = p.span > 0 ? (s.n + p.span - 1) / p.span : 1;  // no empty part
  p.blocks = base * p.splits;
  return p;
}

}  // namespace qk
