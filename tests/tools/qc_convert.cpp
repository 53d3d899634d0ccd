// qc_convert: drives qconform's scalar conversions from raw files, for the Python peer tests
// (tests/peer/test_numerics_peer.py) that compare them bit for bit with ml_dtypes and numpy.
//   usage: qc_convert MODE IN OUT
//   encode modes read little-endian float32 and write the raw encoding:
//     bf16, bf16-rz, f16 (uint16 each); e4m3, e4m3-sat, e5m2, e5m2-sat (uint8); s8 (int8)
//   decode modes read the raw encoding and write float32:
//     dec-bf16, dec-f16 (uint16 in); dec-e4m3, dec-e5m2, dec-e8m0, dec-e2m1 (uint8 in; e2m1: the low 4 bits)
// Deliberately self-contained (plain stdio) so it depends on nothing but numerics.hpp.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
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

template <typename In, typename Out, typename Fn>
std::vector<unsigned char> map(const std::vector<unsigned char>& in, Fn fn) {
  const size_t n = in.size() / sizeof(In);
  std::vector<unsigned char> out(n * sizeof(Out));
  for (size_t i = 0; i < n; ++i) {
    In x;
    std::memcpy(&x, in.data() + i * sizeof(In), sizeof(In));
    const Out y = fn(x);
    std::memcpy(out.data() + i * sizeof(Out), &y, sizeof(Out));
  }
  return out;
}

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
  const std::vector<unsigned char> in = read_file(argv[2]);
  std::vector<unsigned char> out;
  size_t unit = 4;
  if (mode == "bf16") {
    out = map<float, uint16_t>(in, [](float x) { return qc::f32_to_bf16(x); });
  } else if (mode == "bf16-rz") {
    out = map<float, uint16_t>(in, [](float x) { return qc::f32_to_bf16_rz(x); });
  } else if (mode == "f16") {
    out = map<float, uint16_t>(in, [](float x) { return qc::f32_to_f16(x); });
  } else if (mode == "e4m3") {
    out = map<float, uint8_t>(in, [](float x) { return qc::f32_to_e4m3fn(x, /*saturate=*/false); });
  } else if (mode == "e4m3-sat") {
    out = map<float, uint8_t>(in, [](float x) { return qc::f32_to_e4m3fn(x, /*saturate=*/true); });
  } else if (mode == "e5m2") {
    out = map<float, uint8_t>(in, [](float x) { return qc::f32_to_e5m2(x, /*saturate=*/false); });
  } else if (mode == "e5m2-sat") {
    out = map<float, uint8_t>(in, [](float x) { return qc::f32_to_e5m2(x, /*saturate=*/true); });
  } else if (mode == "s8") {
    out = map<float, int8_t>(in, [](float x) { return qc::f32_to_s8_rni_sat(x); });
  } else if (mode == "dec-bf16") {
    unit = 2;
    out = map<uint16_t, float>(in, [](uint16_t b) { return qc::bf16_to_f32(b); });
  } else if (mode == "dec-f16") {
    unit = 2;
    out = map<uint16_t, float>(in, [](uint16_t b) { return qc::f16_to_f32(b); });
  } else if (mode == "dec-e4m3") {
    unit = 1;
    out = map<uint8_t, float>(in, [](uint8_t b) { return qc::e4m3fn_to_f32(b); });
  } else if (mode == "dec-e5m2") {
    unit = 1;
    out = map<uint8_t, float>(in, [](uint8_t b) { return qc::e5m2_to_f32(b); });
  } else if (mode == "dec-e8m0") {
    unit = 1;
    out = map<uint8_t, float>(in, [](uint8_t b) { return qc::decode_f32<qc::kE8M0>(b); });
  } else if (mode == "dec-e2m1") {
    unit = 1;
    out = map<uint8_t, float>(in, [](uint8_t b) { return qc::decode_f32<qc::kE2M1>(b & 0xFu); });
  } else {
    std::fprintf(stderr, "qc_convert: unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  if (in.size() % unit != 0) {
    std::fprintf(stderr, "qc_convert: %s: size %zu is not a multiple of %zu bytes\n", argv[2], in.size(), unit);
    return 2;
  }
  FILE* f = std::fopen(argv[3], "wb");
  if (f == nullptr || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "qc_convert: cannot write %s\n", argv[3]);
    return 2;
  }
  return 0;
}
