// A fuzz target is LLVMFuzzerTestOneInput plus the seed inputs it was
// started from. fuzz/run.sh builds each target with clang as a libFuzzer
// binary (ASan + UBSan) and runs it from the committed corpus/<target>/;
// replay_driver.cc runs the same target without libFuzzer (any compiler), as
// the data.*_fuzz.replay ctests of the main build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// The inputs the committed corpus was written from (`<target> --write-seeds DIR`).
std::vector<std::string> fuzz_seeds();

// A scratch folder for the files a target must write (the parsers read
// files), removed at exit; logging is switched off so a million error paths
// stay quiet.
std::string fuzz_scratch_dir(const char* target);
