// Applying a factored panel to trailing columns: row swaps, the U block solve
// and the DGEMM update (HPL_pdupdateNN with HPL_pdlaswp).
#pragma once

#include <cstdint>
#include <vector>

#include "hpl/panel.h"

namespace qk::hpc::hpl {

struct UpdateWork {
  std::vector<double> slots;  // swap buffer, (jb + displaced rows) x columns
};

// Updates my local columns [jl0, jl1) (all with global index >= k + jb) with
// `pan`. Collective over the process column when P > 1. When *inject_fault
// is set and the DGEMM touches my rows, one entry is corrupted and the flag
// cleared (the residual check must then fail).
void panel_update(const Panel& pan, const Grid& g, LocalMatrix& a, int64_t jl0, int64_t jl1,
                  UpdateWork& w, bool* inject_fault);

}  // namespace qk::hpc::hpl
