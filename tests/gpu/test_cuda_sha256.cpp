// The SHA-256 leaf kernel (src/arms/cuda/kernels/sha256_leaves.cu) against OpenSSL (`qc::Sha256`):
// every leaf's digest byte for byte, with the leaves at base offsets 0, 1, 2, 3, 4, 8, 12, 16 and 4095
// into a device buffer of random bytes (every 16-byte alignment class the kernel has a template for,
// and an odd offset past a whole chunk) and leaf counts 1, 7, 33 and 2999 (a partial last thread
// block); digests also at an odd output address; an all-0x00 and an all-0xFF leaf, also against the
// digests `sha256sum` prints; `leaves` == 0 writes nothing. In every case no output byte outside the
// digests changes (the output buffer is poisoned and checked around them).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "arms/cuda/cuda.hpp"
#include "core/sha256.hpp"

#ifdef QC_WITH_CUDA  // the test binary is built everywhere; without CUDA it says SKIPPED before any test runs
#include "arms/cuda/cuda_common.hpp"
#include "arms/cuda/kernels/sha256_leaves.cuh"
#endif

namespace qc {
namespace {

#ifdef QC_WITH_CUDA
constexpr size_t kLeaf = cuda_kernels::kSha256LeafBytes;
constexpr size_t kDigest = 32;
constexpr unsigned char kPoison = 0xA5;
constexpr size_t kGuard = 64;  // poisoned output bytes checked after the last digest

std::string hex(const unsigned char* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", p[i]);
  return s;
}

// OpenSSL's digests of the `leaves` leaves at host `bytes`, 32 bytes each.
std::vector<unsigned char> openssl_digests(const unsigned char* bytes, uint64_t leaves) {
  std::vector<unsigned char> out(leaves * kDigest);
  for (uint64_t i = 0; i < leaves; ++i) {
    Sha256 h;
    h.update(std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes + i * kLeaf), kLeaf));
    const std::string d = h.bytes();
    std::memcpy(out.data() + i * kDigest, d.data(), kDigest);
  }
  return out;
}

// `leaves` leaves from byte `offset` of the input buffer, digests to byte `out_offset` of the output buffer.
struct LeafCase {
  size_t offset;
  uint64_t leaves;
  size_t out_offset;
  std::string id() const { return fmt::format("offset={} leaves={} out_offset={}", offset, leaves, out_offset); }
};

// Runs `c` on `device` (a copy of `host`) and returns "" when every digest equals OpenSSL's and no
// other output byte changed, else the counts and the first mismatches, each with its leaf index,
// input offset and both digests in hex.
std::string run_case(const cuda::DeviceBuffer<unsigned char>& device, const std::vector<unsigned char>& host,
                     const LeafCase& c) {
  const size_t digest_bytes = c.leaves * kDigest, out_bytes = c.out_offset + digest_bytes + kGuard;
  cuda::DeviceBuffer<unsigned char> out(out_bytes);
  QC_CUDA_CHECK(cudaMemset(out.get(), kPoison, out_bytes));
  const std::string launch =
      cuda_kernels::launch_sha256_leaves(device.get() + c.offset, c.leaves, out.get() + c.out_offset, nullptr);
  if (launch.rfind("error:", 0) == 0) return c.id() + ": " + launch;
  QC_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<unsigned char> got = out.to_host();
  const std::vector<unsigned char> want = openssl_digests(host.data() + c.offset, c.leaves);
  std::string report;
  int64_t wrong_leaves = 0, wrong_outside = 0;
  for (uint64_t i = 0; i < c.leaves; ++i) {
    const unsigned char* g = got.data() + c.out_offset + i * kDigest;
    const unsigned char* w = want.data() + i * kDigest;
    if (std::memcmp(g, w, kDigest) == 0) continue;
    if (wrong_leaves++ < 8) {
      report += fmt::format("\n  leaf {} (input bytes [{}, {}) of the buffer, base offset {}): got {} want {}", i,
                            c.offset + i * kLeaf, c.offset + (i + 1) * kLeaf, c.offset, hex(g, kDigest), hex(w, kDigest));
    }
  }
  for (size_t b = 0; b < out_bytes; ++b) {
    if (b >= c.out_offset && b < c.out_offset + digest_bytes) continue;
    if (got[b] != kPoison && wrong_outside++ < 8) {
      report += fmt::format("\n  output byte {} outside the digests changed: {:#04x} (poison {:#04x})", b, got[b], kPoison);
    }
  }
  if (wrong_leaves == 0 && wrong_outside == 0) return "";
  return fmt::format("{}: {} of {} digests differ, {} output bytes outside them changed [{}]:{}", c.id(), wrong_leaves,
                     c.leaves, wrong_outside, launch, report);
}

std::vector<unsigned char> random_bytes(size_t n, uint64_t seed) {
  std::vector<unsigned char> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}
#endif

TEST(CudaSha256, RandomLeavesAtEveryAlignmentEqualOpenSsl) {
#ifdef QC_WITH_CUDA
  const size_t offsets[] = {0, 1, 2, 3, 4, 8, 12, 16, 4095};
  const uint64_t counts[] = {1, 7, 33, 2999};
  const std::vector<unsigned char> host = random_bytes(4095 + 2999 * kLeaf + 64, /*seed=*/20240611);
  const cuda::DeviceBuffer<unsigned char> device{std::span<const unsigned char>(host)};
  std::vector<LeafCase> cases;
  for (size_t offset : offsets) {
    for (uint64_t leaves : counts) {
      cases.push_back({offset, leaves, 0});
      // Digests at an odd address (byte stores) and at a 16-byte aligned one that is not the allocation's start.
      if (leaves == 7) cases.push_back({offset, leaves, 5}), cases.push_back({offset, leaves, 16});
    }
  }
  for (const LeafCase& c : cases) {
    const std::string d = run_case(device, host, c);
    EXPECT_TRUE(d.empty()) << d;
  }
  std::printf("  %zu cases: every digest equals OpenSSL's, no other output byte written\n", cases.size());
#else
  GTEST_SKIP() << "this build has no CUDA";
#endif
}

// A leaf of 0x00 bytes and one of 0xFF bytes, aligned and at offset 7, inside a buffer of other bytes.
TEST(CudaSha256, ConstantLeavesEqualOpenSslAndSha256sum) {
#ifdef QC_WITH_CUDA
  // `head -c 4096 /dev/zero | sha256sum`, and the same of 4096 0xFF bytes.
  const std::string zero_hex = "ad7facb2586fc6e966c004d7d1d16b024f5805ff7cb47c7a85dabd8b48892ca7";
  const std::string ff_hex = "f47a8ec3e9aff2318d896942282ad4fe37d6391c82914f54a5da8a37de1300c6";
  for (size_t offset : {size_t{0}, size_t{7}}) {
    std::vector<unsigned char> host = random_bytes(offset + 2 * kLeaf + 64, /*seed=*/99);
    std::memset(host.data() + offset, 0x00, kLeaf);
    std::memset(host.data() + offset + kLeaf, 0xFF, kLeaf);
    const cuda::DeviceBuffer<unsigned char> device{std::span<const unsigned char>(host)};
    const LeafCase c{offset, 2, 0};
    const std::string d = run_case(device, host, c);
    EXPECT_TRUE(d.empty()) << d;
    const std::vector<unsigned char> want = openssl_digests(host.data() + offset, 2);
    EXPECT_EQ(hex(want.data(), kDigest), zero_hex) << c.id();
    EXPECT_EQ(hex(want.data() + kDigest, kDigest), ff_hex) << c.id();
  }
#else
  GTEST_SKIP() << "this build has no CUDA";
#endif
}

TEST(CudaSha256, NoLeavesWritesNothing) {
#ifdef QC_WITH_CUDA
  const std::vector<unsigned char> host = random_bytes(kLeaf + 1, /*seed=*/5);
  const cuda::DeviceBuffer<unsigned char> device{std::span<const unsigned char>(host)};
  cuda::DeviceBuffer<unsigned char> out(kGuard);
  QC_CUDA_CHECK(cudaMemset(out.get(), kPoison, kGuard));
  const unsigned char* inputs[] = {device.get(), device.get() + 1, nullptr};
  for (const unsigned char* data : inputs) {
    const std::string launch = cuda_kernels::launch_sha256_leaves(data, 0, data ? out.get() : nullptr, nullptr);
    EXPECT_EQ(launch.rfind("error:", 0), std::string::npos) << launch;
  }
  QC_CUDA_CHECK(cudaDeviceSynchronize());
  for (unsigned char b : out.to_host()) ASSERT_EQ(b, kPoison) << "leaves == 0 wrote into the output";
#else
  GTEST_SKIP() << "this build has no CUDA";
#endif
}

}  // namespace
}  // namespace qc
