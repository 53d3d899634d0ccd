// qc_convert: drives qconform's scalar conversions from raw files, for the Python peer tests
// (tests/peer/test_numerics_peer.py) that compare them bit for bit with ml_dtypes and numpy.
//   usage: qc_convert MODE IN OUT
//   encode modes read little-endian float32 and write the raw encoding:
//     bf16, bf16-rz, f16 (uint16 each); e4m3, e4m3-sat, e5m2, e5m2-sat (uint8); s8 (int8)
//   decode modes read the raw encoding and write float32:
//     dec-bf16, dec-f16 (uint16 in); dec-e4m3, dec-e5m2, dec-e8m0, dec-e2m1 (uint8 in; e2m1: the low 4 bits)
// Deliberately self-contained (plain stdio) so it depends on nothing but numerics.hpp.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/numerics.hpp"

namespace {

std::vector<unsigned char> read_file(const char* path) {
  std::vector<unsigned char> bytes;
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) return bytes;
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  std::fclose(f);
  return bytes;
}

using Bytes = std::vector<unsigned char>;

struct Mode {
  std::string_view name;
  size_t unit;  // bytes of one input element
  Bytes (*convert)(const Bytes& in);
};

// The mode `name`: every `In` of the input through `fn`, written as `Out`.
template <typename In, typename Out, auto fn>
constexpr Mode mode(std::string_view name) {
  return {name, sizeof(In), [](const Bytes& in) {
            const size_t n = in.size() / sizeof(In);
            Bytes out(n * sizeof(Out));
            for (size_t i = 0; i < n; ++i) {
              In x;
              std::memcpy(&x, in.data() + i * sizeof(In), sizeof(In));
              const Out y = fn(x);
              std::memcpy(out.data() + i * sizeof(Out), &y, sizeof(Out));
            }
            return out;
          }};
}

constexpr Mode kModes[] = {
    mode<float, uint16_t, [](float x) { return qc::f32_to_bf16(x); }>("bf16"),
    mode<float, uint16_t, [](float x) { return qc::f32_to_bf16_rz(x); }>("bf16-rz"),
    mode<float, uint16_t, [](float x) { return qc::f32_to_f16(x); }>("f16"),
    mode<float, uint8_t, [](float x) { return qc::f32_to_e4m3fn(x, /*saturate=*/false); }>("e4m3"),
    mode<float, uint8_t, [](float x) { return qc::f32_to_e4m3fn(x, /*saturate=*/true); }>("e4m3-sat"),
    mode<float, uint8_t, [](float x) { return qc::f32_to_e5m2(x, /*saturate=*/false); }>("e5m2"),
    mode<float, uint8_t, [](float x) { return qc::f32_to_e5m2(x, /*saturate=*/true); }>("e5m2-sat"),
    mode<float, int8_t, [](float x) { return qc::f32_to_s8_rni_sat(x); }>("s8"),
    mode<uint16_t, float, [](uint16_t b) { return qc::bf16_to_f32(b); }>("dec-bf16"),
    mode<uint16_t, float, [](uint16_t b) { return qc::f16_to_f32(b); }>("dec-f16"),
    mode<uint8_t, float, [](uint8_t b) { return qc::e4m3fn_to_f32(b); }>("dec-e4m3"),
    mode<uint8_t, float, [](uint8_t b) { return qc::e5m2_to_f32(b); }>("dec-e5m2"),
    mode<uint8_t, float, [](uint8_t b) { return qc::decode_f32<qc::kE8M0>(b); }>("dec-e8m0"),
    mode<uint8_t, float, [](uint8_t b) { return qc::decode_f32<qc::kE2M1>(b & 0xFu); }>("dec-e2m1"),
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: qc_convert MODE IN OUT  (MODE: bf16 bf16-rz f16 e4m3 e4m3-sat e5m2 e5m2-sat s8 "
                         "dec-bf16 dec-f16 dec-e4m3 dec-e5m2 dec-e8m0 dec-e2m1)\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (FILE* probe = std::fopen(argv[2], "rb")) {
    std::fclose(probe);
  } else {
    std::fprintf(stderr, "qc_convert: cannot read %s\n", argv[2]);
    return 2;
  }
  const Bytes in = read_file(argv[2]);
  const Mode* m = std::find_if(std::begin(kModes), std::end(kModes), [&](const Mode& x) { return x.name == mode; });
  if (m == std::end(kModes)) {
    std::fprintf(stderr, "qc_convert: unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  if (in.size() % m->unit != 0) {
    std::fprintf(stderr, "qc_convert: %s: size %zu is not a multiple of %zu bytes\n", argv[2], in.size(), m->unit);
    return 2;
  }
  const Bytes out = m->convert(in);
  FILE* f = std::fopen(argv[3], "wb");
  if (f == nullptr || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "qc_convert: cannot write %s\n", argv[3]);
    return 2;
  }
  return 0;
}
