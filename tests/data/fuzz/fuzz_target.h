// A fuzz target is LLVMFuzzerTestOneInput plus its seed inputs. Built with
// clang and -DQK_FUZZ=ON it is a libFuzzer binary (tests/data/scripts/run_fuzzers.sh);
// otherwise fuzz_driver.cc replays the seeds and a bounded number of random
// mutations of them, as a ctest that runs in every build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
std::vector<std::string> fuzz_seeds();
