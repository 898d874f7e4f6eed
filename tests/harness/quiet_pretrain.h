// `qk pretrain-gpt`'s library call for the device tests: the flags as the
// command takes them (mock data, so no data files are checked), on
// `device`, printing nothing and measuring no GEMM peak.
#pragma once

#include <string>
#include <vector>

#include "qk/recipes/gpt_pretrain.h"
#include "qk/recipes/megatron_args.h"

namespace qk::harness {

inline recipes::PretrainGptResult quiet_pretrain(const std::vector<std::string>& args, const std::string& device) {
  recipes::MegatronArgsOptions mo;
  mo.check_data_files = false;
  recipes::PretrainGptOptions o;
  o.print = [](const std::string&) {};
  o.measure_gemm_peak = false;
  o.device = device;
  return recipes::pretrain_gpt(recipes::parse_megatron_args(args, mo).args, o);
}

}  // namespace qk::harness
