// Entry point of qconform_gpu_tests (ctest label `gpu`): prints SKIPPED with the reason and exits
// 77 (ctest's SKIP_RETURN_CODE) when this build has no CUDA or no device is present; otherwise
// runs every test. Build and run on a GPU machine: `make test-gpu` (docs/gpu.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "arms/cuda/cuda.hpp"

int main(int argc, char** argv) {
  std::string reason;
  if (!qc::cuda_available(&reason)) {
    std::printf("SKIPPED: %s\n", reason.c_str());
    return 77;
  }
  std::printf("qconform_gpu_tests on %s\n", qc::cuda_device_description().c_str());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
