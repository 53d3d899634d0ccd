// SHA-256 (FIPS 180-4) of many consecutive fixed-size leaves of device memory, one thread per leaf.
//
// Layout: data [leaves, 4096] bytes, contiguous, at any address (odd ones included); out [leaves, 32]
// bytes at any address, digest i at out[32*i], in the standard big-endian byte order (what `sha256sum`
// prints). Each leaf is a message of its own: 64 data blocks, then one padding block (0x80, zeros, the
// bit length 32768 big-endian), the same block for every leaf: its message schedule is folded into the
// round constants at compile time (`kPaddingKW`), so that block costs 64 rounds and no schedule.
//
// Loads: every alignment reads the leaf as aligned 16-byte chunks (`uint4`, ld.global.nc with a hint
// to fetch 256 bytes into L2: `load_chunk`). A 64-byte block at byte offset `mis` = data % 16 into its
// first chunk spans the 5 chunks from there; the fifth is the first chunk of the next block, carried
// over in registers, so each block costs 4 vector loads at every alignment. Message word i is bytes mis+4i .. mis+4i+3 of those 80, taken from two adjacent
// words with one `__byte_perm` that also swaps them to big-endian: the word offset mis / 4 is a template
// parameter (register arrays need compile-time indices), the byte offset mis % 4 a runtime selector
// (with mis % 4 == 0 the same permutation is a plain byte swap). The leaf's first and last chunks
// hold bytes outside the leaf when mis != 0: those two are read byte by byte, only the leaf's bytes,
// so no thread reads outside data[0 .. 4096*leaves).
//
// Block: 256 threads, one leaf per thread (64-bit leaf index, grid-stride loop); rounds fully
// unrolled with a 16-word rolling message schedule in registers, rotations as funnel shifts (SHF), the
// three-input functions as LOP3; the round constants are `const __constant__` tables, which nvcc folds
// into immediates of the adds. ptxas (nvcc 13.0, sm_90a): 60-64 registers, no stack, no local memory
// (`cuobjdump --dump-resource-usage`), so 4 blocks (1024 threads) per SM. Beside it, `ref::` is
// FIPS 180-4 §6.2 as written (constexpr): it builds the padding table and is checked at compile time
// against published digests.
//
// Test: `make test-gpu` (tests/gpu/test_cuda_sha256.cpp: every digest equals OpenSSL's, at base
// offsets 0-4, 8, 12, 16 and 4095, leaf counts 1 to ~3000, all-zero and all-0xFF leaves, `leaves` == 0
// writes nothing). Benchmark: build/bench/bench_cuda_sha256 (GB/s beside a device-to-device copy).
#include "sha256_leaves.cuh"

#include <algorithm>

namespace qc::cuda_kernels {
namespace {

constexpr int kBlockThreads = 256;
constexpr int kBlockBytes = 64;
constexpr int kChunkBytes = 16;  // one uint4
constexpr int kBlocksPerLeaf = static_cast<int>(kSha256LeafBytes / kBlockBytes);
constexpr int kChunksPerLeaf = static_cast<int>(kSha256LeafBytes / kChunkBytes);
constexpr uint32_t kLeafBits = static_cast<uint32_t>(kSha256LeafBytes * 8);
static_assert(kSha256LeafBytes % kBlockBytes == 0,
              "a leaf is whole blocks, so its padding (0x80, zeros, 64-bit length) is one block of its own");
static_assert(kLeafBits == 32768, "the padding block's length word");
static_assert(kBlocksPerLeaf == 64 && kChunksPerLeaf == 256);
// Leaves are kSha256LeafBytes apart, a multiple of 16: every leaf sits at the same offset in its chunk.
static_assert(kSha256LeafBytes % kChunkBytes == 0);

struct Words64 {
  uint32_t v[64];
};
struct Words8 {
  uint32_t v[8];
};

// FIPS 180-4 §4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64 primes.
constexpr Words64 kK = {{
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}};
// FIPS 180-4 §5.3.3: the initial hash value.
constexpr Words8 kH0 = {{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}};

// The scalar reference: FIPS 180-4 §4.1.2 and §6.2.2 as written, evaluated by the compiler only.
namespace ref {

constexpr uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
constexpr uint32_t big_sigma0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
constexpr uint32_t big_sigma1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
constexpr uint32_t small_sigma0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
constexpr uint32_t small_sigma1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }
constexpr uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
constexpr uint32_t maj(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }

// Step 1: the message schedule W_0 .. W_63 of the 16 big-endian words `m` of one block.
constexpr Words64 schedule(const uint32_t (&m)[16]) {
  Words64 w{};
  for (int t = 0; t < 16; ++t) w.v[t] = m[t];
  for (int t = 16; t < 64; ++t) w.v[t] = small_sigma1(w.v[t - 2]) + w.v[t - 7] + small_sigma0(w.v[t - 15]) + w.v[t - 16];
  return w;
}

// Steps 2-4: one block into the hash value `h`.
constexpr void compress(Words8& h, const uint32_t (&m)[16]) {
  const Words64 w = schedule(m);
  uint32_t a = h.v[0], b = h.v[1], c = h.v[2], d = h.v[3], e = h.v[4], f = h.v[5], g = h.v[6], hh = h.v[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t t1 = hh + big_sigma1(e) + ch(e, f, g) + kK.v[t] + w.v[t];
    const uint32_t t2 = big_sigma0(a) + maj(a, b, c);
    hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h.v[0] += a, h.v[1] += b, h.v[2] += c, h.v[3] += d, h.v[4] += e, h.v[5] += f, h.v[6] += g, h.v[7] += hh;
}

// The last block of every leaf (§5.1.1): the bit 1 after the message, zeros, the 64-bit length.
constexpr void padding_block(uint32_t (&m)[16]) {
  for (uint32_t& x : m) x = 0;
  m[0] = 0x80000000u;
  m[15] = kLeafBits;  // the length's high word, m[14], is 0
}

// The digest of a leaf whose every byte is `byte`.
constexpr Words8 leaf_of(uint8_t byte) {
  Words8 h = kH0;
  uint32_t m[16] = {};
  for (uint32_t& x : m) x = byte * 0x01010101u;
  for (int block = 0; block < kBlocksPerLeaf; ++block) compress(h, m);
  padding_block(m);
  compress(h, m);
  return h;
}

constexpr bool equal(const Words8& a, const Words8& b) {
  for (int i = 0; i < 8; ++i)
    if (a.v[i] != b.v[i]) return false;
  return true;
}

// K_t + W_t of the padding block: its 64 rounds without a schedule.
constexpr Words64 padding_kw() {
  uint32_t m[16] = {};
  padding_block(m);
  Words64 kw = schedule(m);
  for (int t = 0; t < 64; ++t) kw.v[t] += kK.v[t];
  return kw;
}

}  // namespace ref

// The reference against published digests: FIPS 180-2 appendix B.1 ("abc"), and `sha256sum` of a
// 4096-byte leaf of 0x00 bytes and of 0xFF bytes.
constexpr Words8 sha256_abc() {
  uint32_t m[16] = {0x61626380u, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24};
  Words8 h = kH0;
  ref::compress(h, m);
  return h;
}
static_assert(ref::equal(sha256_abc(), {{0xba7816bf, 0x8f01cfea, 0x414140de, 0x5dae2223, 0xb00361a3, 0x96177a9c,
                                          0xb410ff61, 0xf20015ad}}));
static_assert(ref::equal(ref::leaf_of(0x00), {{0xad7facb2, 0x586fc6e9, 0x66c004d7, 0xd1d16b02, 0x4f5805ff, 0x7cb47c7a,
                                                0x85dabd8b, 0x48892ca7}}));
static_assert(ref::equal(ref::leaf_of(0xFF), {{0xf47a8ec3, 0xe9aff231, 0x8d896942, 0x282ad4fe, 0x37d6391c, 0x82914f54,
                                                0xa5da8a37, 0xde1300c6}}));

// For the device; their values are known at compile time, so the unrolled rounds take them as immediates.
__constant__ const Words8 kInitialHash = kH0;
__constant__ const Words64 kRoundK = kK;
__constant__ const Words64 kPaddingKW = ref::padding_kw();

// ---- The device fast path: the same functions on funnel shifts (SHF) and three-input logic (LOP3).

__device__ __forceinline__ uint32_t rotr(uint32_t x, int n) { return __funnelshift_r(x, x, n); }
__device__ __forceinline__ uint32_t big_sigma0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
__device__ __forceinline__ uint32_t big_sigma1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
__device__ __forceinline__ uint32_t small_sigma0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
__device__ __forceinline__ uint32_t small_sigma1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }
__device__ __forceinline__ uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
__device__ __forceinline__ uint32_t maj(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }

// One round on the working variables s = (a, b, ..., h) with `kw` = K_t + W_t. Unrolled, the
// renaming below costs no instruction.
__device__ __forceinline__ void sha_round(uint32_t (&s)[8], uint32_t kw) {
  const uint32_t t1 = s[7] + big_sigma1(s[4]) + ch(s[4], s[5], s[6]) + kw;
  const uint32_t t2 = big_sigma0(s[0]) + maj(s[0], s[1], s[2]);
  s[7] = s[6], s[6] = s[5], s[5] = s[4], s[4] = s[3] + t1;
  s[3] = s[2], s[2] = s[1], s[1] = s[0], s[0] = t1 + t2;
}

// One data block `w` (16 big-endian words, overwritten: W_t lives in w[t % 16]) into `h`.
__device__ __forceinline__ void compress(uint32_t (&h)[8], uint32_t (&w)[16]) {
  uint32_t s[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) s[i] = h[i];
#pragma unroll
  for (int t = 0; t < 64; ++t) {
    if (t >= 16) w[t & 15] += small_sigma1(w[(t - 2) & 15]) + w[(t - 7) & 15] + small_sigma0(w[(t - 15) & 15]);
    sha_round(s, kRoundK.v[t] + w[t & 15]);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] += s[i];
}

// The padding block, the same for every leaf: K_t + W_t precomputed.
__device__ __forceinline__ void compress_padding(uint32_t (&h)[8]) {
  uint32_t s[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) s[i] = h[i];
#pragma unroll
  for (int t = 0; t < 64; ++t) sha_round(s, kPaddingKW.v[t]);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] += s[i];
}

// The aligned chunk at `chunk`, non-coherent (the input is read-only during the launch), with the
// hint that L2 fetch the whole 256-byte aligned segment around it: a thread reads its leaf front to back
// (four blocks per segment), and DRAM serves one 256-byte burst better than four scattered 64-byte ones.
__device__ __forceinline__ uint4 load_chunk(const uint4* chunk) {
  uint4 v;
  asm("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(__cvta_generic_to_global(chunk)));
  return v;
}

// Bytes [lo, hi) of the aligned chunk at `chunk`, the others zero; bytes outside the range are not
// read. Only a leaf's first and last chunk come here (once each per leaf).
__device__ __forceinline__ uint4 load_chunk_part(const uint4* chunk, int lo, int hi) {
  if (lo == 0 && hi == kChunkBytes) return load_chunk(chunk);
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(chunk);
  uint32_t v[4] = {0, 0, 0, 0};
#pragma unroll
  for (int k = 0; k < kChunkBytes; ++k) {
    if (k >= lo && k < hi) v[k / 4] |= static_cast<uint32_t>(__ldg(bytes + k)) << (8 * (k % 4));
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ uint32_t byte_swap(uint32_t x) { return __byte_perm(x, 0, 0x0123); }

// The 8 big-endian words of `h` as 32 bytes at `dst` (16-byte stores when `dst` is 16-byte aligned).
__device__ __forceinline__ void store_digest(unsigned char* dst, const uint32_t (&h)[8]) {
  if ((reinterpret_cast<uintptr_t>(dst) & (kChunkBytes - 1)) == 0) {
    uint4* d = reinterpret_cast<uint4*>(dst);
    d[0] = make_uint4(byte_swap(h[0]), byte_swap(h[1]), byte_swap(h[2]), byte_swap(h[3]));
    d[1] = make_uint4(byte_swap(h[4]), byte_swap(h[5]), byte_swap(h[6]), byte_swap(h[7]));
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) dst[i] = static_cast<unsigned char>(h[i / 4] >> (24 - 8 * (i % 4)));
  }
}

// `kWordOffset` = (data % 16) / 4; `select`: the `__byte_perm` selector of the byte offset data % 4.
template <int kWordOffset>
__global__ void __launch_bounds__(kBlockThreads) sha256_leaves_kernel(const unsigned char* __restrict__ data,
                                                                     uint64_t leaves, unsigned char* __restrict__ out,
                                                                     uint32_t select) {
  const int mis = static_cast<int>(reinterpret_cast<uintptr_t>(data) & (kChunkBytes - 1));
  // The aligned chunk holding the leaf's first byte; its first `mis` bytes belong to the previous leaf.
  const uint4* first_chunk = reinterpret_cast<const uint4*>(data - mis);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kBlockThreads;
  for (uint64_t leaf = static_cast<uint64_t>(blockIdx.x) * kBlockThreads + threadIdx.x; leaf < leaves; leaf += stride) {
    const uint4* chunks = first_chunk + leaf * kChunksPerLeaf;
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) h[i] = kInitialHash.v[i];
    // Chunk 0 of the current block's 5-chunk window: the leaf's first chunk, then the previous block's chunk 4.
    uint4 carry = load_chunk_part(chunks, mis, kChunkBytes);
#pragma unroll 1
    for (int block = 0; block < kBlocksPerLeaf; ++block) {
      const uint4* c = chunks + block * (kBlockBytes / kChunkBytes);
      const uint4 c1 = load_chunk(c + 1), c2 = load_chunk(c + 2), c3 = load_chunk(c + 3);
      // Chunk 4 of the last block is the chunk after the leaf: only its first `mis` bytes are the leaf's.
      const uint4 c4 = block + 1 < kBlocksPerLeaf ? load_chunk(c + 4) : load_chunk_part(c + 4, 0, mis);
      const uint32_t window[20] = {carry.x, carry.y, carry.z, carry.w, c1.x, c1.y, c1.z, c1.w, c2.x, c2.y,
                                   c2.z,    c2.w,    c3.x,    c3.y,    c3.z, c3.w, c4.x, c4.y, c4.z, c4.w};
      uint32_t w[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) w[i] = __byte_perm(window[kWordOffset + i], window[kWordOffset + i + 1], select);
      compress(h, w);
      carry = c4;
    }
    compress_padding(h);
    store_digest(out + leaf * 32, h);
  }
}

}  // namespace

std::string launch_sha256_leaves(const unsigned char* data, uint64_t leaves, unsigned char* out, cudaStream_t stream) {
  if (leaves == 0) return "qc::sha256_leaves_kernel: 0 leaves, nothing launched";
  if (data == nullptr || out == nullptr) return "error: sha256_leaves: data or out is null";
  // 2^40 leaves = 4 PiB: far past any device, and 32 * leaves cannot overflow.
  if (leaves > (uint64_t{1} << 40)) return "error: sha256_leaves: " + std::to_string(leaves) + " leaves (at most 2^40)";
  const int mis = static_cast<int>(reinterpret_cast<uintptr_t>(data) % kChunkBytes);
  // Message word i is bytes r .. r+3 of the 8 bytes of two adjacent little-endian words: result byte 3
  // (most significant) takes byte r, byte 0 takes byte r+3.
  const uint32_t r = static_cast<uint32_t>(mis % 4);
  const uint32_t select = (r + 3) | (r + 2) << 4 | (r + 1) << 8 | r << 12;
  const uint64_t blocks = std::min<uint64_t>((leaves + kBlockThreads - 1) / kBlockThreads, 0x7FFFFFFF);
  const dim3 grid(static_cast<unsigned>(blocks));
  switch (mis / 4) {
    case 0: sha256_leaves_kernel<0><<<grid, kBlockThreads, 0, stream>>>(data, leaves, out, select); break;
    case 1: sha256_leaves_kernel<1><<<grid, kBlockThreads, 0, stream>>>(data, leaves, out, select); break;
    case 2: sha256_leaves_kernel<2><<<grid, kBlockThreads, 0, stream>>>(data, leaves, out, select); break;
    default: sha256_leaves_kernel<3><<<grid, kBlockThreads, 0, stream>>>(data, leaves, out, select); break;
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("error: launch: ") + cudaGetErrorString(err);
  return "qc::sha256_leaves_kernel<word offset " + std::to_string(mis / 4) + "> (byte offset " + std::to_string(r) +
         ", 16-byte loads, " + ((reinterpret_cast<uintptr_t>(out) % kChunkBytes) == 0 ? "16-byte" : "byte") +
         " digest stores) leaves=" + std::to_string(leaves) + " grid=" + std::to_string(grid.x) +
         " block=" + std::to_string(kBlockThreads);
}

}  // namespace qc::cuda_kernels
