// .npy reader/writer. Files are built by hand from the format description (numpy/lib/format.py);
// the byte-exact comparison against `np.save` itself lives in tests/peer/test_safetensors_peer.py.
// Run: ./build/tests/qconform_unit_tests --gtest_filter='Npy*'
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <initializer_list>

#include "core/fileio.hpp"
#include "core/npy.hpp"

namespace fs = std::filesystem;
using qc::DType;
using qc::Tensor;

namespace {

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A version-1.0 (or 2.0/3.0) file with the given header dict text and data.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const size_t len_bytes = major == 1 ? 2 : 4;
  while ((6 + 2 + len_bytes + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  for (size_t i = 0; i < len_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

template <class T>
std::string raw(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

// The returned tensor may view the bytes, so a copy of them rides along as its owner.
Tensor parse(const std::string& bytes, std::optional<DType> opaque = std::nullopt) {
  auto owner = std::make_shared<const std::string>(bytes);
  return qc::parse_npy(as_bytes(*owner), "case.npy", owner, opaque);
}

void expect_rejected(const std::string& bytes, std::initializer_list<std::string_view> fragments,
                     std::optional<DType> opaque = std::nullopt) {
  try {
    parse(bytes, opaque);
    ADD_FAILURE() << "accepted a malformed .npy; expected `" << *fragments.begin() << "`";
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::input) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("case.npy"), std::string::npos) << what;
    for (auto f : fragments) EXPECT_NE(what.find(f), std::string::npos) << "missing `" << f << "` in: " << what;
  }
}

}  // namespace

TEST(Npy, ReadsLittleEndianCOrder) {
  const Tensor t = parse(npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }",
                                   raw<int32_t>({1, -2, 3, -4, 5, 2147483647})));
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.span<int32_t>()[1], -2);
  EXPECT_EQ(t.span<int32_t>()[5], 2147483647);
}

TEST(Npy, ReadsVersions2And3AndScalars) {
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
  for (int major : {1, 2, 3}) {
    const Tensor t = parse(npy_bytes(dict, raw<double>({-0.25}), major));
    EXPECT_EQ(t.numel(), 1) << "version " << major;
    EXPECT_EQ(t.span<double>()[0], -0.25) << "version " << major;
  }
  const Tensor one = parse(npy_bytes("{\"descr\": \"|u1\", \"fortran_order\": False, \"shape\": (3,)}", "abc"));
  EXPECT_EQ(one.shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(one.span<uint8_t>()[2], 'c');
}

TEST(Npy, FortranOrderIsReorderedToC) {
  // Logical [[0, 1, 2], [10, 11, 12]] stored column by column.
  const Tensor t = parse(npy_bytes("{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3), }",
                                   raw<int16_t>({0, 10, 1, 11, 2, 12})));
  ASSERT_TRUE(t.is_contiguous());
  const std::vector<int16_t> expected = {0, 1, 2, 10, 11, 12};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(t.span<int16_t>()[i], expected[i]) << "element " << i;
  // Three axes: element (i, j, k) at i + 2j + 6k in Fortran order; value = 100i + 10j + k.
  std::vector<int16_t> stored(2 * 3 * 4);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) stored[i + 2 * j + 6 * k] = static_cast<int16_t>(100 * i + 10 * j + k);
  std::string data(reinterpret_cast<const char*>(stored.data()), stored.size() * 2);
  const Tensor t3 = parse(npy_bytes("{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3, 4), }", data));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        ASSERT_EQ(t3.span<int16_t>()[i * 12 + j * 4 + k], 100 * i + 10 * j + k) << i << "," << j << "," << k;
}

TEST(Npy, BigEndianIsSwapped) {
  const Tensor t = parse(npy_bytes("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }",
                                   std::string("\x00\x00\x01\x02\xff\xff\xff\xfe", 8)));
  EXPECT_EQ(t.span<int32_t>()[0], 0x0102);
  EXPECT_EQ(t.span<int32_t>()[1], -2);
}

TEST(Npy, OpaqueTypesNeedADeclaredDtype) {
  const std::string file = npy_bytes("{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }", raw<uint16_t>({0x3F80, 0xC000}));
  expect_rejected(file, {"opaque type `<V2`", "bfloat16"});
  const Tensor t = parse(file, DType::bf16);
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_EQ(t.span<uint16_t>()[1], 0xC000);
  expect_rejected(file, {"1-byte opaque type", "e4m3", "found `<V2`"}, DType::e4m3);
}

TEST(Npy, RoundTripEveryDtype) {
  std::string dir = (fs::temp_directory_path() / "qc-npy-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  for (DType d : qc::kAllDTypes) {
    SCOPED_TRACE(std::string(qc::dtype_name(d)));
    Tensor t = Tensor::empty(d, {4, 3});
    auto b = t.mutable_bytes();
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>((i * 29 + 7) & 0xFF);
    if (d == DType::boolean) {
      for (auto& x : b) x = static_cast<std::byte>(static_cast<unsigned>(x) & 1);
    }
    const std::string path = dir + "/t.npy";
    qc::write_npy(path, t);
    const bool opaque = d == DType::bf16 || d == DType::e4m3 || d == DType::e5m2;
    const Tensor back = qc::read_npy(path, opaque ? std::optional<DType>(d) : std::nullopt);
    EXPECT_EQ(back.dtype(), d);
    EXPECT_EQ(back.shape(), t.shape());
    ASSERT_EQ(back.bytes().size(), t.bytes().size());
    EXPECT_EQ(std::memcmp(back.bytes().data(), t.bytes().data(), t.bytes().size()), 0);
    // The data starts 64-byte aligned, as numpy writes it.
    const std::string content = qc::read_file(path);
    EXPECT_EQ((content.size() - t.nbytes()) % 64, 0u);
    EXPECT_EQ(content[content.size() - t.nbytes() - 1], '\n');
  }
  // Transposed input is written in C order.
  Tensor m = Tensor::empty(DType::i8, {2, 3});
  for (int i = 0; i < 6; ++i) m.mutable_span<int8_t>()[i] = static_cast<int8_t>(i);
  qc::write_npy(dir + "/tt.npy", m.transposed());
  const Tensor back = qc::read_npy(dir + "/tt.npy");
  EXPECT_EQ(back.shape(), (std::vector<int64_t>{3, 2}));
  const std::vector<int8_t> expected = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back.span<int8_t>()[i], expected[i]);
  fs::remove_all(dir);
}

TEST(Npy, HeaderLayoutFollowsNumpy) {
  // What numpy writes for np.zeros((2, 3), np.float32): dict, 20 spare spaces (21 digits minus the
  // one digit of the first axis), pad to a multiple of 64, newline. Header length 118 = 'v'.
  const std::string out = qc::serialize_npy(Tensor::empty(DType::f32, {2, 3}));
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_EQ(out.substr(0, 10), std::string("\x93NUMPY\x01\x00v\x00", 10));
  EXPECT_EQ(out.substr(10, dict.size()), dict);
  EXPECT_EQ(out.size(), 128u + 24u);
  EXPECT_EQ(out[127], '\n');
  const std::string one_d = "{'descr': '|i1', 'fortran_order': False, 'shape': (7,), }";
  EXPECT_EQ(qc::serialize_npy(Tensor::empty(DType::i8, {7})).substr(10, one_d.size()), one_d);
}

TEST(Npy, Malformed) {
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  expect_rejected("PK\x03\x04", {"magic"});
  expect_rejected(std::string("\x93NUMPY\x04\x00", 8) + "xx", {"version", "4.0"});
  std::string truncated = npy_bytes(ok_dict, raw<float>({1, 2}));
  expect_rejected(truncated.substr(0, 40), {"header length", "truncated"});
  expect_rejected(npy_bytes(ok_dict, raw<float>({1})), {"expected 8 bytes", "found 4"});
  expect_rejected(npy_bytes(ok_dict, raw<float>({1, 2, 3})), {"expected 8 bytes", "found 12"});
  expect_rejected(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')),
                  {"`descr`", "<c8"});
  expect_rejected(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", ""), {"npy header"});
  expect_rejected(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1, }", ""),
                  {"npy header"});
  expect_rejected(npy_bytes("{'descr': '<f4', 'fortran_order': False, }", ""), {"exactly the keys"});
  expect_rejected(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", ""), {"non-negative"});
  expect_rejected(npy_bytes("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", raw<float>({1, 2})),
                  {"npy header"});
  expect_rejected(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", ""),
                  {"63 bits"});
  expect_rejected(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", ""),
                  {"below 2^63"});
  expect_rejected(npy_bytes("{'descr': '<f4', 'descr': '<f4', 'shape': (2,), }", ""), {"twice"});
}
