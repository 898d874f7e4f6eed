// The force share of this process in a job launched by `qk run` (or mpirun
// with MASTER_ADDR and MASTER_PORT set: whatever qk::dist reads), for
// md::run / md::mdrun:
//
//   qk::md::ForceShare share = qk::md::process_share();   // size 1 when alone
//   qk::md::mdrun(args, share.rank == 0 ? std::cout : nowhere, share);
//
// With several processes it joins qk::dist's default process group (once)
// and sums over it: an all-reduce, then rank 0's sums broadcast so every
// rank holds the same bits.
#pragma once

#include "qk/hpc/md/forces.h"

namespace qk::md {

ForceShare process_share();

}  // namespace qk::md
