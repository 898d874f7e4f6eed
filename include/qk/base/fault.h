// Fault injection for tests of crash recovery: a process kills itself with
// SIGKILL (as `kill -9` would) at a named point, chosen by the environment.
//
//   QK_FAULT_KILL="step:1:37,checkpoint:0:2,-,step:0:90"
//
// Comma-separated entries, one per attempt of a `qk run` job: entry i applies
// when QK_RESTART_COUNT == i ("-" or a missing entry: no fault). An entry
// SITE:RANK:N kills the process whose RANK (default 0) is RANK when it reaches
// point SITE for the N-th time (point(site)) or with value N (point(site, v)).
// Unset, a point costs one branch.
//
//   qk::fault::point("checkpoint");           // n-th checkpoint commit of this process
//   qk::fault::point("step", global_step);    // after optimizer step `global_step`
#pragma once

#include <cstdint>
#include <string_view>

namespace qk::fault {

// Counts calls per site; kills when the count matches.
void point(std::string_view site);
// Kills when `value` matches.
void point(std::string_view site, int64_t value);

}  // namespace qk::fault
