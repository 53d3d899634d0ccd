// Exact INT8 GEMM kernels, compiled once per Highway target (the `foreach_target.h` pattern) and
// selected at run time by HWY_DYNAMIC_DISPATCH.
//
// a [M,K] row-major int8 (leading dimension lda), w [N,K] row-major int8 (Wᵀ as column-major,
// leading dimension ldw), c [M,N] row-major int32 (leading dimension ldc):
//   c[i,j] = Σ_k a[i,k]·w[j,k], exact. Callers guarantee K·2^14 < 2^31.
// Never saturating: no `vpmaddubsw`-style int16 pair sums anywhere.
//
// Kernels:
// - AVX3_DL (Ice Lake, Zen 4) when the CPU reports AVX512_VNNI: VNNI `vpdpbusd` (u8 × s8, four products per int32 lane) on an
//   activation shifted to unsigned, with an exact offset correction (proof at `VnniKernel`).
// - every other target except SCALAR: int8 sign-extended to int16 at packing time, then
//   `ReorderWidenMulAccumulate` (x86: `pmaddwd`), whose pair sums cannot saturate for int8
//   inputs: |a0·b0 + a1·b1| <= 2·2^14 = 32768 < 2^31.
//
// Blocking: W is packed per panel of NR columns (the whole K), A once per call; a register tile
// of MR rows × NR columns accumulates the whole K without touching memory, then is stored.
// Work is split over panels (and over rows when there are few panels) between worker threads.
//
// Build and test:
//   cmake --build build-accum -j2 --target qconform_unit_tests &&
//   ./build-accum/tests/qconform_unit_tests --gtest_filter='Accum*'

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // also compile the Ice Lake / Zen 4 target (VNNI) into the dispatch table
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "accum/accum_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/aligned_allocator.h>
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "accum/accum_kernels.hpp"

#undef QC_ACCUM_VNNI
#if HWY_TARGET == HWY_AVX3_DL
#define QC_ACCUM_VNNI 1
#else
#define QC_ACCUM_VNNI 0
#endif

HWY_BEFORE_NAMESPACE();
namespace qc::accum_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }
inline int64_t round_up(int64_t x, int64_t y) { return ceil_div(x, y) * y; }

#if QC_ACCUM_VNNI
// ------------------------------------------------------------------------------------------
// VNNI kernel. `vpdpbusd acc, u, s` adds, to each int32 lane, the four products u8·s8 of that
// lane's bytes. Its non-saturating form (`vpdpbusds` is the saturating one; never used) adds
// with two's-complement wrap-around, so every lane is exact modulo 2^32.
//
// Exactness proof. Let a_u = a + 128 ∈ [0, 255] (the byte a XOR 0x80). Then
//   Σ_k a_u[k]·w[k] = Σ_k a[k]·w[k] + 128·Σ_k w[k].
// The accumulator starts at init = -128·Σ_k w[k] (|init| <= 128·128·K < 2^31, exact in int32,
// computed below with `vpdpbusd` of the byte 128 against w, itself without wrap-around), so at
// the end it holds Σ_k a[k]·w[k] (mod 2^32). Intermediate values may wrap (Σ a_u·w can reach
// 255·128·K > 2^31), which is harmless because only the residue mod 2^32 is carried. The true
// value satisfies |Σ a·w| <= K·2^14 < 2^31 (the caller's precondition), so it is the unique
// int32 in its residue class: the lane holds it exactly. Padding: K is padded to a multiple
// of 4 with w = 0, which contributes a_u·0 = 0 for any a_u and 0 to Σ w.
//
// Highway 1.0.3's AVX3_DL target string enables `avxvnni` (the VEX form) but not `avx512vnni`,
// so the functions that use `vpdpbusd` on zmm registers enable it themselves, and `GemmI32`
// selects this kernel only when the CPU reports AVX512_VNNI (else the int16 kernel below).
#define QC_VNNI_ATTR __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
struct VnniKernel {
  using AT = uint8_t;
  using WT = int8_t;
  static constexpr int64_t kKStep = 4;  // k values per int32 lane per instruction
  static constexpr int kMR = 6;         // 6 rows × 4 zmm = 24 accumulators of 32 registers
  static constexpr int kNV = 4;
  int64_t nr() const { return 16 * kNV; }

  // In-place transpose of a 16×16 matrix of dwords held as 16 zmm rows: afterwards r[q] holds
  // dword q of the original rows 0..15 in order (verified by simulating the shuffles; the
  // accumulator tests pin the packing end to end).
  static QC_VNNI_ATTR void transpose16x16_epi32(__m512i* r) {
    __m512i t[16], u[16];
    for (int p = 0; p < 8; ++p) {
      t[2 * p] = _mm512_unpacklo_epi32(r[2 * p], r[2 * p + 1]);
      t[2 * p + 1] = _mm512_unpackhi_epi32(r[2 * p], r[2 * p + 1]);
    }
    for (int g = 0; g < 16; g += 4) {
      u[g + 0] = _mm512_unpacklo_epi64(t[g + 0], t[g + 2]);
      u[g + 1] = _mm512_unpackhi_epi64(t[g + 0], t[g + 2]);
      u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
      u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int h = 0; h < 16; h += 8) {
      for (int j = 0; j < 4; ++j) {
        t[h + j] = _mm512_shuffle_i32x4(u[h + j], u[h + 4 + j], 0x88);
        t[h + 4 + j] = _mm512_shuffle_i32x4(u[h + j], u[h + 4 + j], 0xdd);
      }
    }
    for (int j = 0; j < 8; ++j) {
      r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
      r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
    }
  }

  // a_u[i*kp + kk] = a[i,kk] XOR 0x80 (= a + 128 as uint8); the padding holds 0x80 (a = 0).
  void pack_a(const int8_t* a, int64_t lda, int64_t r0, int64_t r1, int64_t k, int64_t kp, AT* out) const {
    for (int64_t i = r0; i < r1; ++i) {
      const int8_t* src = a + i * lda;
      AT* dst = out + i * kp;
      for (int64_t kk = 0; kk < k; ++kk) dst[kk] = static_cast<AT>(static_cast<uint8_t>(src[kk]) ^ 0x80u);
      for (int64_t kk = k; kk < kp; ++kk) dst[kk] = 0x80u;
    }
  }

  // panel[(q*64 + col)*4 + b] = w[n0+col, 4q+b] (0 past K and past the last column), and
  // init[col] = -128·Σ_k w[n0+col, k].
  //
  // Packing is a 32-bit transpose: dword q of 16 consecutive rows of w becomes one zmm of the
  // panel. Rows are read 64 bytes at a time (masked loads give the zero padding past K and
  // never touch memory there) and transposed in registers (16×16 dwords: 32-, 64-, 128- and
  // 256-bit interleaves). Reading dword columns directly (gather, or scalar) was 10× slower:
  // rows K bytes apart alias in the L1 cache when K is a multiple of 4096.
  QC_VNNI_ATTR void pack_w(const int8_t* w, int64_t ldw, int64_t n0, int64_t ncols, int64_t k, int64_t kp,
                           WT* panel, int32_t* init) const {
    const int64_t kq = kp / 4, nr64 = nr();
    for (int j = 0; j < kNV; ++j) {
      const int64_t nj = std::clamp<int64_t>(ncols - 16 * j, 0, 16);
      const int8_t* base = w + (n0 + 16 * j) * ldw;
      for (int64_t t = 0; t * 64 < k; ++t) {
        const int64_t bytes = std::min<int64_t>(64, k - 64 * t);
        const __mmask64 mask = bytes == 64 ? ~__mmask64{0} : ((__mmask64{1} << bytes) - 1u);
        __m512i r[16];
        for (int i = 0; i < 16; ++i) {
          r[i] = i < nj ? _mm512_maskz_loadu_epi8(mask, base + i * ldw + 64 * t) : _mm512_setzero_si512();
        }
        transpose16x16_epi32(r);
        const int64_t qn = std::min<int64_t>(16, kq - 16 * t);
        WT* dst = panel + (16 * t) * nr64 * 4 + 64 * j;
        for (int64_t qq = 0; qq < qn; ++qq) _mm512_store_si512(dst + qq * nr64 * 4, r[qq]);
      }
    }
    // Σ 128·w per column with the same instruction: |Σ| <= 128·128·K < 2^31, no wrap-around.
    const __m512i c128 = _mm512_set1_epi32(static_cast<int32_t>(0x80808080u));
    __m512i s[kNV];
    for (int j = 0; j < kNV; ++j) s[j] = _mm512_setzero_si512();
    for (int64_t q = 0; q < kq; ++q) {
      for (int j = 0; j < kNV; ++j) {
        s[j] = _mm512_dpbusd_epi32(s[j], c128, _mm512_load_si512(panel + q * nr64 * 4 + j * 64));
      }
    }
    for (int j = 0; j < kNV; ++j) _mm512_store_si512(init + j * 16, _mm512_sub_epi32(_mm512_setzero_si512(), s[j]));
  }

  // `acc += dpbusd(a_u, w)` in place. GCC 12 models the intrinsic as a three-operand operation
  // and, with 24 live accumulators, copies and spills them on every iteration; the in-place asm
  // form keeps each accumulator in its register. Operand order (AT&T): w (s8), a_u (u8), acc.
  static HWY_INLINE QC_VNNI_ATTR __m512i dpbusd(__m512i acc, __m512i a_u, __m512i w) {
    asm("vpdpbusd %[w], %[a], %[acc]" : [acc] "+v"(acc) : [a] "v"(a_u), [w] "v"(w));
    return acc;
  }

  // One register tile: MR rows × 64 columns, 24 named accumulators.
  template <int MR>
  QC_VNNI_ATTR void micro(const AT* ap, int64_t kp, const WT* wp, const int32_t* init, int32_t* c, int64_t ldc,
                          int64_t ncols) const {
    static_assert(MR >= 1 && MR <= 6 && kNV == 4, "the tile is at most 6 rows of 4 zmm");
    const __m512i i0 = _mm512_load_si512(init), i1 = _mm512_load_si512(init + 16);
    const __m512i i2 = _mm512_load_si512(init + 32), i3 = _mm512_load_si512(init + 48);
#define QC_ROW_INIT(r) __m512i c##r##0 = i0, c##r##1 = i1, c##r##2 = i2, c##r##3 = i3;
    QC_ROW_INIT(0) QC_ROW_INIT(1) QC_ROW_INIT(2) QC_ROW_INIT(3) QC_ROW_INIT(4) QC_ROW_INIT(5)
#undef QC_ROW_INIT
    const int64_t kq = kp / 4;
    const AT* arow = ap;
    for (int64_t q = 0; q < kq; ++q, arow += 4) {
      const WT* wq = wp + q * 256;
      const __m512i w0 = _mm512_load_si512(wq), w1 = _mm512_load_si512(wq + 64);
      const __m512i w2 = _mm512_load_si512(wq + 128), w3 = _mm512_load_si512(wq + 192);
#define QC_ROW_STEP(r)                                      \
  if constexpr (MR > r) {                                   \
    int32_t quad;                                           \
    std::memcpy(&quad, arow + r * kp, 4);                   \
    const __m512i va = _mm512_set1_epi32(quad);             \
    c##r##0 = dpbusd(c##r##0, va, w0);         \
    c##r##1 = dpbusd(c##r##1, va, w1);         \
    c##r##2 = dpbusd(c##r##2, va, w2);         \
    c##r##3 = dpbusd(c##r##3, va, w3);         \
  }
      QC_ROW_STEP(0) QC_ROW_STEP(1) QC_ROW_STEP(2) QC_ROW_STEP(3) QC_ROW_STEP(4) QC_ROW_STEP(5)
#undef QC_ROW_STEP
    }
    // Column masks of the (possibly ragged) panel.
    auto mask_of = [ncols](int64_t j) {
      const int64_t nj = std::clamp<int64_t>(ncols - 16 * j, 0, 16);
      return static_cast<__mmask16>((uint32_t{1} << nj) - 1u);
    };
    const __mmask16 m0 = mask_of(0), m1 = mask_of(1), m2 = mask_of(2), m3 = mask_of(3);
#define QC_ROW_STORE(r)                                     \
  if constexpr (MR > r) {                                   \
    int32_t* crow = c + r * ldc;                            \
    _mm512_mask_storeu_epi32(crow, m0, c##r##0);            \
    _mm512_mask_storeu_epi32(crow + 16, m1, c##r##1);       \
    _mm512_mask_storeu_epi32(crow + 32, m2, c##r##2);       \
    _mm512_mask_storeu_epi32(crow + 48, m3, c##r##3);       \
  }
    QC_ROW_STORE(0) QC_ROW_STORE(1) QC_ROW_STORE(2) QC_ROW_STORE(3) QC_ROW_STORE(4) QC_ROW_STORE(5)
#undef QC_ROW_STORE
  }
};
#endif  // QC_ACCUM_VNNI

#if HWY_TARGET == HWY_SCALAR
// ------------------------------------------------------------------------------------------
// Scalar fallback (one-lane target: no int16 pairs): plain int32 sums, each partial sum bounded
// by K·2^14 < 2^31, so no wrap-around.
struct ScalarKernel {
  using AT = int8_t;
  using WT = int8_t;
  static constexpr int64_t kKStep = 1;
  static constexpr int kMR = 4;
  static constexpr int64_t kNR = 4;
  int64_t nr() const { return kNR; }

  void pack_a(const int8_t* a, int64_t lda, int64_t r0, int64_t r1, int64_t k, int64_t kp, AT* out) const {
    for (int64_t i = r0; i < r1; ++i) std::memcpy(out + i * kp, a + i * lda, static_cast<size_t>(k));
  }

  // panel[kk*kNR + col] = w[n0+col, kk] (0 past the last column); `init` is all zeros.
  void pack_w(const int8_t* w, int64_t ldw, int64_t n0, int64_t ncols, int64_t k, int64_t kp, WT* panel,
              int32_t* init) const {
    for (int64_t col = 0; col < kNR; ++col) {
      init[col] = 0;
      for (int64_t kk = 0; kk < kp; ++kk) panel[kk * kNR + col] = col < ncols ? w[(n0 + col) * ldw + kk] : WT{0};
    }
  }

  template <int MR>
  void micro(const AT* ap, int64_t kp, const WT* wp, const int32_t* /*init*/, int32_t* c, int64_t ldc,
             int64_t ncols) const {
    int32_t sum[MR][kNR] = {};
    for (int64_t kk = 0; kk < kp; ++kk) {
      for (int r = 0; r < MR; ++r) {
        const int32_t av = ap[r * kp + kk];
        for (int64_t j = 0; j < kNR; ++j) sum[r][j] += av * int32_t{wp[kk * kNR + j]};
      }
    }
    for (int r = 0; r < MR; ++r) {
      for (int64_t j = 0; j < ncols && j < kNR; ++j) c[r * ldc + j] = sum[r][j];
    }
  }
};


#else
// ------------------------------------------------------------------------------------------
// Portable kernel: operands sign-extended to int16 when packed; `ReorderWidenMulAccumulate`
// multiplies int16 pairs into int32 (x86: `pmaddwd`, which only saturates for
// (-32768)·(-32768) twice, impossible for int8 values). After `RearrangeToOddPlusEven`, lane i
// holds the sum of the products of int16 lanes 2i and 2i+1. Every partial sum is bounded by
// K·2^14 < 2^31: no wrap-around at all.
struct WidenKernel {
  using AT = int16_t;
  using WT = int16_t;
  using D32 = hn::ScalableTag<int32_t>;
  using D16 = hn::Repartition<int16_t, D32>;
  static constexpr int64_t kKStep = 2;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  static constexpr int kMR = 6;  // 32 vector registers: 24 accumulators
  static constexpr int kNV = 4;
#else
  static constexpr int kMR = 3;  // 16 vector registers: 9 accumulators, 3 W, 1 broadcast
  static constexpr int kNV = 3;
#endif
  int64_t nr() const { return static_cast<int64_t>(hn::Lanes(D32())) * kNV; }

  void pack_a(const int8_t* a, int64_t lda, int64_t r0, int64_t r1, int64_t k, int64_t kp, AT* out) const {
    for (int64_t i = r0; i < r1; ++i) {
      const int8_t* src = a + i * lda;
      AT* dst = out + i * kp;
      for (int64_t kk = 0; kk < k; ++kk) dst[kk] = src[kk];
      for (int64_t kk = k; kk < kp; ++kk) dst[kk] = 0;
    }
  }

  // panel[(q*nr + col)*2 + b] = w[n0+col, 2q+b] (0 past K and past the last column). No
  // correction: `init` is all zeros.
  void pack_w(const int8_t* w, int64_t ldw, int64_t n0, int64_t ncols, int64_t k, int64_t kp, WT* panel,
              int32_t* init) const {
    const int64_t nrv = nr(), kq = kp / 2;
    for (int64_t col = 0; col < nrv; ++col) {
      init[col] = 0;
      WT* dst = panel + col * 2;
      if (col >= ncols) {
        for (int64_t q = 0; q < kq; ++q) dst[q * nrv * 2 + 0] = dst[q * nrv * 2 + 1] = 0;
        continue;
      }
      const int8_t* src = w + (n0 + col) * ldw;
      for (int64_t q = 0; q < kq; ++q) {
        const int64_t k0 = 2 * q;
        dst[q * nrv * 2 + 0] = src[k0];
        dst[q * nrv * 2 + 1] = k0 + 1 < k ? src[k0 + 1] : WT{0};
      }
    }
  }

  // One register tile: MR rows × kNV vectors, as named variables (an array of vectors was
  // spilled to the stack on every iteration by GCC 12). `s` holds the pair sums; `t` is the
  // second accumulator of `ReorderWidenMulAccumulate` (unused on x86, where `pmaddwd` already
  // adds each pair; dead code there).
  template <int MR>
  void micro(const AT* ap, int64_t kp, const WT* wp, const int32_t* /*init*/, int32_t* c, int64_t ldc,
             int64_t ncols) const {
    static_assert(MR >= 1 && MR <= 6 && kNV <= 4, "the tile is at most 6 rows of 4 vectors");
    const D32 d32;
    const D16 d16;
    using V32 = hn::Vec<D32>;
    using V16 = hn::Vec<D16>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d32));
    const int64_t nrv = lanes * kNV;
    const V32 z = hn::Zero(d32);
#define QC_ROW_INIT(r) V32 s##r##0 = z, s##r##1 = z, s##r##2 = z, s##r##3 = z, t##r##0 = z, t##r##1 = z, t##r##2 = z, t##r##3 = z;
    QC_ROW_INIT(0) QC_ROW_INIT(1) QC_ROW_INIT(2) QC_ROW_INIT(3) QC_ROW_INIT(4) QC_ROW_INIT(5)
#undef QC_ROW_INIT
    const int64_t kq = kp / 2;
    for (int64_t q = 0; q < kq; ++q) {
      const WT* wq = wp + q * nrv * 2;
      const V16 w0 = hn::Load(d16, wq);
      const V16 w1 = kNV > 1 ? hn::Load(d16, wq + lanes * 2) : w0;
      const V16 w2 = kNV > 2 ? hn::Load(d16, wq + lanes * 4) : w0;
      const V16 w3 = kNV > 3 ? hn::Load(d16, wq + lanes * 6) : w0;
#define QC_ROW_STEP(r)                                                                    \
  if constexpr (MR > r) {                                                                 \
    int32_t pair;                                                                         \
    std::memcpy(&pair, ap + r * kp + q * 2, 4);                                           \
    const V16 va = hn::BitCast(d16, hn::Set(d32, pair));                                  \
    s##r##0 = hn::ReorderWidenMulAccumulate(d32, w0, va, s##r##0, t##r##0);               \
    if constexpr (kNV > 1) s##r##1 = hn::ReorderWidenMulAccumulate(d32, w1, va, s##r##1, t##r##1); \
    if constexpr (kNV > 2) s##r##2 = hn::ReorderWidenMulAccumulate(d32, w2, va, s##r##2, t##r##2); \
    if constexpr (kNV > 3) s##r##3 = hn::ReorderWidenMulAccumulate(d32, w3, va, s##r##3, t##r##3); \
  }
      QC_ROW_STEP(0) QC_ROW_STEP(1) QC_ROW_STEP(2) QC_ROW_STEP(3) QC_ROW_STEP(4) QC_ROW_STEP(5)
#undef QC_ROW_STEP
    }
    HWY_ALIGN int32_t tmp[hn::MaxLanes(D32())];
    auto store = [&](V32 sum, V32 second, int64_t r, int64_t j) HWY_ATTR {
      const int64_t nj = std::min<int64_t>(lanes, ncols - lanes * j);
      if (nj <= 0) return;
      const V32 v = hn::RearrangeToOddPlusEven(sum, second);
      if (nj == lanes) {
        hn::StoreU(v, d32, c + r * ldc + lanes * j);
      } else {
        hn::Store(v, d32, tmp);
        std::memcpy(c + r * ldc + lanes * j, tmp, static_cast<size_t>(nj) * sizeof(int32_t));
      }
    };
#define QC_ROW_STORE(r)                                    \
  if constexpr (MR > r) {                                  \
    store(s##r##0, t##r##0, r, 0);                         \
    if constexpr (kNV > 1) store(s##r##1, t##r##1, r, 1);  \
    if constexpr (kNV > 2) store(s##r##2, t##r##2, r, 2);  \
    if constexpr (kNV > 3) store(s##r##3, t##r##3, r, 3);  \
  }
    QC_ROW_STORE(0) QC_ROW_STORE(1) QC_ROW_STORE(2) QC_ROW_STORE(3) QC_ROW_STORE(4) QC_ROW_STORE(5)
#undef QC_ROW_STORE
  }
};

#endif

// Runs rows [r0, r1) of one packed panel: full MR-row tiles, then one ragged tile.
template <class K>
void run_rows(const K& kern, const typename K::AT* ap, int64_t kp, const typename K::WT* panel,
              const int32_t* init, int64_t r0, int64_t r1, int32_t* c, int64_t ldc, int64_t ncols) {
  int64_t i = r0;
  for (; i + K::kMR <= r1; i += K::kMR) kern.template micro<K::kMR>(ap + i * kp, kp, panel, init, c + i * ldc, ldc, ncols);
  const int64_t rest = r1 - i;
  const typename K::AT* at = ap + i * kp;
  int32_t* ct = c + i * ldc;
  switch (rest) {
    case 0: break;
    case 1: kern.template micro<1>(at, kp, panel, init, ct, ldc, ncols); break;
    case 2: kern.template micro<2>(at, kp, panel, init, ct, ldc, ncols); break;
    case 3: kern.template micro<3>(at, kp, panel, init, ct, ldc, ncols); break;
    case 4: kern.template micro<4>(at, kp, panel, init, ct, ldc, ncols); break;
    case 5: kern.template micro<5>(at, kp, panel, init, ct, ldc, ncols); break;
    default: HWY_ASSERT(false);  // kMR <= 6
  }
}

template <class Kernel>
void gemm_with(const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, int64_t m, int64_t n, int64_t k,
               int32_t* c, int64_t ldc, int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0);
    return;
  }
  static_assert(Kernel::kMR <= 6, "run_rows handles ragged tiles of at most 5 rows");
  const Kernel kern;
  const int64_t nr = kern.nr();
  const int64_t kp = round_up(k, Kernel::kKStep);
  threads = std::max(threads, 1);

  // Packed A, shared by all workers (rows split between them).
  auto ap = hwy::AllocateAligned<typename Kernel::AT>(static_cast<size_t>(m * kp));
  {
    const int workers = static_cast<int>(std::min<int64_t>(threads, ceil_div(m, 16)));
    run_workers(workers, [&](int worker) HWY_ATTR {
      const int64_t per = ceil_div(m, workers);
      const int64_t r0 = std::min(m, per * worker), r1 = std::min(m, r0 + per);
      kern.pack_a(a, lda, r0, r1, k, kp, ap.get());
    });
  }

  // Tasks: (panel, row chunk). Rows are split only when there are too few panels to keep every
  // worker busy; consecutive tasks of a worker that share a panel reuse its packing.
  const int64_t n_panels = ceil_div(n, nr);
  int64_t m_chunk = m;
  if (threads > 1 && n_panels < 2 * threads) {
    const int64_t want = std::min(ceil_div(2 * threads, n_panels), ceil_div(m, Kernel::kMR));
    m_chunk = round_up(ceil_div(m, want), Kernel::kMR);
  }
  const int64_t m_chunks = ceil_div(m, m_chunk);
  const int64_t tasks = n_panels * m_chunks;
  std::atomic<int64_t> next{0};
  const int workers = static_cast<int>(std::min<int64_t>(threads, tasks));
  run_workers(workers, [&](int) HWY_ATTR {
    auto panel = hwy::AllocateAligned<typename Kernel::WT>(static_cast<size_t>(kp * nr));
    auto init = hwy::AllocateAligned<int32_t>(static_cast<size_t>(nr));
    int64_t packed = -1;
    for (int64_t t = next.fetch_add(1); t < tasks; t = next.fetch_add(1)) {
      const int64_t p = t / m_chunks, chunk = t % m_chunks;
      const int64_t n0 = p * nr, ncols = std::min(nr, n - n0);
      if (packed != p) {
        kern.pack_w(w, ldw, n0, ncols, k, kp, panel.get(), init.get());
        packed = p;
      }
      const int64_t r0 = chunk * m_chunk, r1 = std::min(m, r0 + m_chunk);
      run_rows(kern, ap.get(), kp, panel.get(), init.get(), r0, r1, c + n0, ldc, ncols);
    }
  });
}

void GemmI32(const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, int64_t m, int64_t n, int64_t k,
             int32_t* c, int64_t ldc, int threads) {
#if HWY_TARGET == HWY_SCALAR
  gemm_with<ScalarKernel>(a, lda, w, ldw, m, n, k, c, ldc, threads);
#else
#if QC_ACCUM_VNNI
  // Belt and braces: use `vpdpbusd` only where the CPU reports AVX512_VNNI, whatever the
  // dispatcher's AVX3_DL check covers.
  static const bool has_vnni = __builtin_cpu_supports("avx512vnni");
  if (has_vnni) return gemm_with<VnniKernel>(a, lda, w, ldw, m, n, k, c, ldc, threads);
#endif
  gemm_with<WidenKernel>(a, lda, w, ldw, m, n, k, c, ldc, threads);
#endif
}

int64_t TargetOf() { return HWY_TARGET; }

}  // namespace qc::accum_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qc::accum_detail {
HWY_EXPORT(GemmI32);
HWY_EXPORT(TargetOf);

void gemm_i32(const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, int64_t m, int64_t n, int64_t k,
              int32_t* c, int64_t ldc, int threads) {
  HWY_DYNAMIC_DISPATCH(GemmI32)(a, lda, w, ldw, m, n, k, c, ldc, threads);
}

const char* target_name() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetOf)()); }
}  // namespace qc::accum_detail
#endif
