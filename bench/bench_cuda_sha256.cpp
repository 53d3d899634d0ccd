// Benchmark of the SHA-256 leaf kernel (src/arms/cuda/kernels/sha256_leaves.cu): 1 GiB of device
// memory, 262144 leaves of 4096 bytes, hashed at an aligned address, at +1 (the byte-offset path) and
// at +4, against the named baseline in the same run: a device-to-device cudaMemcpy of the same 1 GiB.
//
// Method: CUDA events around each launch, 3 warm-ups, median (and best) of 20 timed launches. GB/s
// counts the bytes hashed, or for the copy the bytes copied (10^9 bytes per GB; the copy reads and
// writes each byte, so its memory traffic is twice its rate). The ratio is the hash rate over the copy
// rate. Every 7th leaf's digest and the last one's are compared with OpenSSL's (a benchmark of wrong
// code is worthless).
//
// Run: `build/bench/bench_cuda_sha256` (SKIPPED without CUDA or a GPU).
#include <cstdio>

#ifndef QC_WITH_CUDA
int main() {
  std::printf("bench_cuda_sha256: SKIPPED: CUDA is not in this build (configure with -DQCONFORM_WITH_CUDA=ON)\n");
  return 0;
}
#else

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "arms/cuda/cuda.hpp"
#include "arms/cuda/cuda_common.hpp"
#include "arms/cuda/kernels/sha256_leaves.cuh"
#include "core/sha256.hpp"
#include "cuda_event_timing.hpp"

namespace {

using namespace qc;
using cuda_kernels::kSha256LeafBytes;

constexpr int kWarmup = 3;
constexpr int kReps = 20;
constexpr uint64_t kLeaves = 262144;  // 1 GiB
constexpr uint64_t kBytes = kLeaves * kSha256LeafBytes;
constexpr size_t kDigest = 32;
constexpr uint64_t kSampleEvery = 7;

using Timing = bench::EventTiming;

template <typename F>
Timing time_ms(F&& launch) {
  return bench::time_launches([&](int) { launch(); }, kWarmup, kReps);
}

double gb_per_s(uint64_t bytes, double ms) { return static_cast<double>(bytes) / (ms * 1e6); }

// How many sampled leaves (every `kSampleEvery`-th and the last) have OpenSSL's digest of the host bytes.
uint64_t matching_samples(const unsigned char* host, const std::vector<unsigned char>& digests, uint64_t* sampled) {
  uint64_t same = 0;
  *sampled = 0;
  auto check = [&](uint64_t leaf) {
    Sha256 h;
    h.update(std::span<const std::byte>(reinterpret_cast<const std::byte*>(host + leaf * kSha256LeafBytes),
                                        kSha256LeafBytes));
    same += std::memcmp(h.bytes().data(), digests.data() + leaf * kDigest, kDigest) == 0;
    ++*sampled;
  };
  for (uint64_t leaf = 0; leaf < kLeaves; leaf += kSampleEvery) check(leaf);
  if ((kLeaves - 1) % kSampleEvery != 0) check(kLeaves - 1);
  return same;
}

}  // namespace

int main() {
  std::string reason;
  if (!qc::cuda_available(&reason)) {
    std::printf("bench_cuda_sha256: SKIPPED: %s\n", reason.c_str());
    return 0;
  }
  std::printf("bench_cuda_sha256 on %s\n", qc::cuda::device_description().c_str());

  // 1 GiB of pseudo-random bytes (splitmix64), 16 bytes more for the offset runs.
  std::vector<unsigned char> host(kBytes + 16);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < host.size(); i += 8) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(host.data() + i, &z, std::min<size_t>(8, host.size() - i));
  }
  const cuda::DeviceBuffer<unsigned char> data{std::span<const unsigned char>(host)};
  cuda::DeviceBuffer<unsigned char> copy(kBytes), digests(kLeaves * kDigest);

  const Timing t_copy =
      time_ms([&] { QC_CUDA_CHECK(cudaMemcpyAsync(copy.get(), data.get(), kBytes, cudaMemcpyDeviceToDevice)); });
  const double copy_rate = gb_per_s(kBytes, t_copy.median_ms);
  std::printf("baseline cudaMemcpy D2D of 1 GiB: %.3f ms = %.0f GB/s copied (best %.0f; %.0f GB/s read+write)\n",
              t_copy.median_ms, copy_rate, gb_per_s(kBytes, t_copy.best_ms), 2 * copy_rate);

  for (size_t offset : {size_t{0}, size_t{1}, size_t{4}}) {
    const unsigned char* p = data.get() + offset;
    std::string id;
    const Timing t = time_ms([&] { id = cuda_kernels::launch_sha256_leaves(p, kLeaves, digests.get(), nullptr); });
    if (id.rfind("error:", 0) == 0) {
      std::printf("sha256_leaves offset +%zu: %s\n", offset, id.c_str());
      continue;
    }
    QC_CUDA_CHECK(cudaDeviceSynchronize());
    uint64_t sampled = 0;
    const uint64_t same = matching_samples(host.data() + offset, digests.to_host(), &sampled);
    const double rate = gb_per_s(kBytes, t.median_ms);
    std::printf("sha256_leaves 1 GiB at offset +%zu: %.3f ms = %.0f GB/s (best %.0f)  hash/copy %.2f  "
                "OpenSSL digests equal %llu of %llu sampled%s  [%s]\n",
                offset, t.median_ms, rate, gb_per_s(kBytes, t.best_ms), rate / copy_rate,
                static_cast<unsigned long long>(same), static_cast<unsigned long long>(sampled),
                same == sampled ? "" : "  MISMATCH", id.c_str());
  }
  return 0;
}
#endif
