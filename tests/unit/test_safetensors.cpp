// safetensors reader/writer, atomic file writes and SHA-256.
// Run: ./build/tests/qconform_unit_tests --gtest_filter='Safetensors*:FileIo*:Sha256*'
//
// Expected bytes of the writer come from the reference implementation's own test vectors
// (safetensors/src/tensor.rs: test_serialization, test_serialization_forced_alignement,
// test_empty); malformed files are built by hand, each breaking exactly one rule.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <random>

#include "input_error.hpp"
#include "temp_dir.hpp"
#include "core/fileio.hpp"
#include "core/safetensors.hpp"
#include "core/sha256.hpp"

namespace fs = std::filesystem;
using qc::DType;
using qc::Tensor;

namespace {

// The shared temporary directory of the unit tests (temp_dir.hpp), named for this file.
struct TempDir : qc::test::TempDir {
  TempDir() : qc::test::TempDir("st") {}
};

std::string u64le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

// A safetensors file from a header text and a data section (header padded to 8 with spaces
// unless `pad` is false).
std::string st_bytes(std::string header, std::string_view data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return u64le(header.size()) + header + std::string(data);
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Tensors may view the bytes, so a copy of them rides along as their owner.
qc::SafetensorsFile parse(const std::string& bytes) {
  auto owner = std::make_shared<const std::string>(bytes);
  return qc::parse_safetensors(as_bytes(*owner), "case.safetensors", owner);
}

// Parsing `bytes` must fail with an input error whose message contains every fragment.
void expect_rejected(const std::string& bytes, std::initializer_list<std::string_view> fragments) {
  try {
    parse(bytes);
    ADD_FAILURE() << "accepted a malformed file; expected an error containing `" << *fragments.begin() << "`";
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::input) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("case.safetensors"), std::string::npos) << "message does not name the file: " << what;
    for (std::string_view f : fragments) EXPECT_NE(what.find(f), std::string::npos) << "missing `" << f << "` in: " << what;
  }
}

std::string zeros(size_t n) { return std::string(n, '\0'); }

// Deterministic bytes from a small LCG (not from the code under test).
std::vector<std::byte> pattern_bytes(size_t n, uint32_t seed) {
  std::vector<std::byte> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return out;
}

std::string hex(std::span<const std::byte> b) {
  std::string s;
  for (std::byte c : b) s += fmt::format("{:02x}", static_cast<unsigned>(c));
  return s;
}

}  // namespace

// ---------------------------------------------------------------- writer vs reference vectors

TEST(SafetensorsWriter, MatchesReferenceSerializationVector) {
  std::vector<float> v = {0, 1, 2, 3, 4, 5};
  Tensor t = Tensor::from_bytes(DType::f32, {1, 2, 3},
                                std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), 24));
  const std::string out = qc::serialize_safetensors({{"attn.0", t}});
  // test_serialization in safetensors/src/tensor.rs.
  const std::vector<uint8_t> expected = {
      64,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 46,  48,  34,  58,  123, 34,  100,
      116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,  112, 101, 34,  58,  91,
      49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115, 34,
      58,  91,  48,  44,  50,  52,  93,  125, 125, 0,   0,   0,   0,   0,   0,   128, 63,  0,   0,   0,   64,
      0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
  ASSERT_EQ(out.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(static_cast<uint8_t>(out[i]), expected[i]) << "byte " << i;
}

TEST(SafetensorsWriter, MatchesReferenceAlignmentVector) {
  std::vector<float> v = {0, 1, 2, 3, 4, 5};
  Tensor t = Tensor::from_bytes(DType::f32, {1, 1, 2, 3},
                                std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), 24));
  const std::string out = qc::serialize_safetensors({{"attn0", t}});
  // test_serialization_forced_alignement: header padded with 7 spaces to 72 bytes.
  const std::string header = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 65u);
  EXPECT_EQ(out.substr(0, 8), u64le(72));
  EXPECT_EQ(out.substr(8, 72), header + std::string(7, ' '));
  EXPECT_EQ(out.size(), 8u + 72u + 24u);
}

TEST(SafetensorsWriter, MatchesReferenceEmptyVectors) {
  EXPECT_EQ(qc::serialize_safetensors({}), u64le(8) + "{}      ");
  const std::string with_meta = qc::serialize_safetensors({}, {{"framework", "pt"}});
  EXPECT_EQ(with_meta, u64le(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(SafetensorsWriter, SortsByDtypeRankThenName) {
  // The reference writer puts larger-ranked dtypes first (Rust `Dtype` order: ... I8 < ... < BF16
  // < I32 < F32 < F64 < I64), then names in byte order.
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"b", Tensor::empty(DType::i8, {3})},   {"a", Tensor::empty(DType::i8, {1})},
      {"z", Tensor::empty(DType::f64, {1})},  {"y", Tensor::empty(DType::i64, {1})},
      {"c", Tensor::empty(DType::bf16, {2})}, {"B", Tensor::empty(DType::f32, {1})},
  };
  const std::string out = qc::serialize_safetensors(tensors);
  const auto parsed = parse(out);
  EXPECT_EQ(parsed.names(), (std::vector<std::string>{"y", "z", "B", "c", "a", "b"}));
  // Every tensor is aligned to its element size inside the data section.
  uint64_t data_start = 8 + parsed.header_size;
  EXPECT_EQ(data_start % 8, 0u);
}

TEST(SafetensorsWriter, RejectsDuplicateAndReservedNames) {
  TempDir dir;
  const std::string path = dir.file("dup.safetensors");
  Tensor t = Tensor::empty(DType::i8, {1});
  EXPECT_THROW(qc::write_safetensors(path, {{"x", t}, {"x", t}}), qc::Error);
  EXPECT_THROW(qc::write_safetensors(path, {{"__metadata__", t}}), qc::Error);
  EXPECT_THROW(qc::write_safetensors(path, {{std::string("bad\xff", 4), t}}), qc::Error);
  EXPECT_TRUE(dir.listing().empty()) << "a rejected write created files";
}

// ---------------------------------------------------------------- round trips

TEST(SafetensorsRoundTrip, EveryDtypeBitExact) {
  TempDir dir;
  std::vector<std::pair<std::string, Tensor>> tensors;
  uint32_t seed = 1;
  for (DType d : qc::kAllDTypes) {
    const std::vector<int64_t> shape = {3, 5, 2};
    auto bytes = pattern_bytes(30 * qc::dtype_size(d), seed++);
    tensors.emplace_back(fmt::format("t.{}", qc::dtype_name(d)), Tensor::from_bytes(d, shape, bytes));
  }
  tensors.emplace_back("scalar", Tensor::from_bytes(DType::f32, {}, pattern_bytes(4, 99)));
  tensors.emplace_back("empty", Tensor::empty(DType::bf16, {0, 4}));
  const std::map<std::string, std::string> meta = {{"source", "unit test"}, {"quote\"and\\slash", "line\nbreak é"}};
  const std::string path = dir.file("all.safetensors");
  qc::write_safetensors(path, tensors, meta);

  const auto file = qc::read_safetensors(path);
  EXPECT_EQ(file.metadata, meta);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& [name, original] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file.contains(name));
    const Tensor& back = file.at(name);
    EXPECT_EQ(back.dtype(), original.dtype());
    EXPECT_EQ(back.shape(), original.shape());
    EXPECT_EQ(hex(back.bytes()), hex(original.bytes()));
    if (back.numel() > 0) {
      EXPECT_FALSE(back.is_writable()) << "expected a zero-copy view of the mapping";
    }
  }
  // The streamed file and the in-memory serialization are the same bytes.
  EXPECT_EQ(qc::read_file(path), qc::serialize_safetensors(tensors, meta));
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"all.safetensors"})) << "temporary files left behind";
}

TEST(SafetensorsRoundTrip, NonContiguousTensorsAreWrittenInCOrder) {
  Tensor t = Tensor::empty(DType::i16, {2, 3});
  auto d = t.mutable_span<int16_t>();
  for (int i = 0; i < 6; ++i) d[i] = static_cast<int16_t>(i * 11 - 20);
  const auto parsed = parse(qc::serialize_safetensors({{"t", t.transposed()}}));
  const Tensor& back = parsed.at("t");
  ASSERT_EQ(back.shape(), (std::vector<int64_t>{3, 2}));
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(back.span<int16_t>()[j * 2 + i], static_cast<int16_t>((i * 3 + j) * 11 - 20)) << j << "," << i;
    }
}

TEST(SafetensorsRoundTrip, MapOutlivesTheFileObject) {
  TempDir dir;
  const std::string path = dir.file("keep.safetensors");
  qc::write_safetensors(path, {{"x", Tensor::from_bytes(DType::u8, {4}, pattern_bytes(4, 7))}});
  Tensor x;
  {
    const auto file = qc::read_safetensors(path);
    x = file.at("x");
  }
  fs::remove(path);  // the mapping survives the unlink and the SafetensorsFile
  EXPECT_EQ(hex(x.bytes()), hex(pattern_bytes(4, 7)));
}

TEST(SafetensorsRead, MissingKeyNamesFileAndKey) {
  const auto f = parse(st_bytes(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", zeros(1)));
  try {
    f.at("b.w_q");
    FAIL() << "no error for a missing key";
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("b.w_q"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("case.safetensors"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsRead, AcceptsWhatTheReferenceAccepts) {
  // Header entries in any order, an unpadded header, leading whitespace, null metadata, empty and
  // scalar tensors, unknown extra fields (ignored by the Rust library too).
  auto f = parse(st_bytes(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                          zeros(8)));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_NO_THROW(parse(st_bytes(R"({"a":{"dtype":"I8","shape":[3],"data_offsets":[0,3]}})", zeros(3), false)));
  EXPECT_NO_THROW(parse(st_bytes(" \n" R"({"a":{"dtype":"I8","shape":[3],"data_offsets":[0,3]}})", zeros(3))));
  EXPECT_NO_THROW(parse(st_bytes(R"({"__metadata__":null})", "")));
  f = parse(st_bytes(R"({"e":{"dtype":"BF16","shape":[0,5],"data_offsets":[0,0]},"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})",
                     zeros(8)));
  EXPECT_EQ(f.at("e").numel(), 0);
  EXPECT_EQ(f.at("s").numel(), 1);
  EXPECT_NO_THROW(parse(st_bytes(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1],"extra":[1,2]}})", zeros(1))));
  EXPECT_NO_THROW(parse(st_bytes("{}", "")));
}

TEST(SafetensorsRead, MisalignedTensorsAreCopied) {
  // An unpadded header of odd length puts the I32 data at an odd address; the reader copies it.
  const std::string h = R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_NE((8 + h.size()) % 4, 0u);
  std::string data("\x01\x00\x00\x00\xff\xff\xff\xff", 8);
  const std::string bytes = st_bytes(h, data, false);
  auto f = parse(bytes);
  const Tensor& a = f.at("a");
  EXPECT_TRUE(a.is_writable()) << "expected an owned copy";
  EXPECT_EQ(a.data<int32_t>()[0], 1);
  EXPECT_EQ(a.data<int32_t>()[1], -1);
}

// ---------------------------------------------------------------- malformed files

TEST(SafetensorsMalformed, TruncatedLengthField) {
  expect_rejected("", {"at least 8 bytes", "0 bytes"});
  expect_rejected(std::string("\x10\x00\x00", 3), {"at least 8 bytes", "3 bytes"});
}

TEST(SafetensorsMalformed, TruncatedHeader) {
  const std::string full = st_bytes(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", zeros(1));
  expect_rejected(full.substr(0, 30), {"header length", "truncated"});
}

TEST(SafetensorsMalformed, HeaderLengthPastEof) {
  expect_rejected(u64le(1000) + "{}", {"header length", "2 bytes", "found 1000"});
  expect_rejected(u64le(UINT64_MAX) + "{}", {"header length", "at most 100000000"});
}

TEST(SafetensorsMalformed, HugeHeaderLength) {
  expect_rejected(u64le(100'000'001) + "{}", {"header length", "at most 100000000", "100000001"});
}

TEST(SafetensorsMalformed, BadJson) {
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8")", ""), {"valid UTF-8 JSON"});
  expect_rejected(st_bytes(R"({"a":1,})", ""), {"valid UTF-8 JSON"});
  expect_rejected(st_bytes("", ""), {"valid UTF-8 JSON"});
  expect_rejected(st_bytes(std::string("{}\0\0\0\0\0\0", 8), "", false), {"valid UTF-8 JSON", "NUL byte at header offset 2"});
  expect_rejected(st_bytes(std::string("{}\0]", 4), ""), {"NUL byte"});
  expect_rejected(st_bytes("{\"a\xff\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", zeros(1)),
                  {"valid UTF-8 JSON"});
  expect_rejected(st_bytes("{} // comment", ""), {"valid UTF-8 JSON"});
}

TEST(SafetensorsMalformed, NonObjectHeader) {
  expect_rejected(st_bytes("[]", ""), {"expected a JSON object", "array"});
  expect_rejected(st_bytes("42", ""), {"expected a JSON object", "number"});
  expect_rejected(st_bytes(R"("x")", ""), {"expected a JSON object", "string"});
}

TEST(SafetensorsMalformed, DuplicateKeys) {
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"I8","shape":[1],"data_offsets":[1,2]}})",
                           zeros(2)),
                  {"unique keys", "`a`"});
  expect_rejected(st_bytes(R"({"__metadata__":{"k":"1","k":"2"}})", ""), {"unique keys", "`k`"});
}

TEST(SafetensorsMalformed, EntryFieldsOfWrongType) {
  expect_rejected(st_bytes(R"({"a":[1,2]})", ""), {"tensor `a`", "expected an object"});
  expect_rejected(st_bytes(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", zeros(1)), {"tensor `a`", "`dtype`", "no such field"});
  expect_rejected(st_bytes(R"({"a":{"dtype":8,"shape":[1],"data_offsets":[0,1]}})", zeros(1)), {"tensor `a`", "`dtype`", "expected a string"});
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8","data_offsets":[0,1]}})", zeros(1)), {"tensor `a`", "`shape`", "no such field"});
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8","shape":"1","data_offsets":[0,1]}})", zeros(1)), {"tensor `a`", "`shape`"});
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8","shape":[1.0],"data_offsets":[0,1]}})", zeros(1)), {"`shape`[0]", "non-negative integer"});
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8","shape":[1]}})", zeros(1)), {"tensor `a`", "`data_offsets`", "no such field"});
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1,2]}})", zeros(1)), {"`data_offsets`", "[begin, end]"});
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,-1]}})", zeros(1)), {"`data_offsets`", "non-negative"});
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":{"0":1}}})", zeros(1)), {"`data_offsets`"});
}

TEST(SafetensorsMalformed, UnknownDtype) {
  expect_rejected(st_bytes(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", zeros(1)),
                  {"tensor `w`", "`dtype`", "`Q4`", "BF16"});
  expect_rejected(st_bytes(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", zeros(4)), {"`f32`"});
  expect_rejected(st_bytes(R"({"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", zeros(8)),
                  {"`C64`", "does not support"});
}

TEST(SafetensorsMalformed, NegativeShape) {
  expect_rejected(st_bytes(R"({"w":{"dtype":"I8","shape":[2,-1],"data_offsets":[0,2]}})", zeros(2)),
                  {"tensor `w`", "`shape`[1]", "non-negative integer", "-1"});
}

TEST(SafetensorsMalformed, ShapeOverflow) {
  expect_rejected(st_bytes(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", ""),
                  {"tensor `w`", "`shape`", "63 bits"});
  expect_rejected(st_bytes(R"({"w":{"dtype":"F64","shape":[18446744073709551615],"data_offsets":[0,0]}})", ""),
                  {"tensor `w`", "`shape`[0]"});
  expect_rejected(st_bytes(R"({"w":{"dtype":"F64","shape":[99999999999999999999999],"data_offsets":[0,0]}})", ""),
                  {"tensor `w`", "`shape`[0]"});
}

TEST(SafetensorsMalformed, ShapeSizeMismatch) {
  expect_rejected(st_bytes(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", zeros(20)),
                  {"tensor `w`", "[2, 3]", "24 bytes", "20 bytes"});
  expect_rejected(st_bytes(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,3]}})", zeros(3)),
                  {"tensor `w`", "6 bytes", "3 bytes"});
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  expect_rejected(st_bytes(R"({"w":{"dtype":"I8","shape":[16],"data_offsets":[0,16]}})", zeros(8)),
                  {"tensor `w`", "inside the data section of 8 bytes", "[0, 16]"});
  expect_rejected(st_bytes(R"({"w":{"dtype":"I8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})", ""),
                  {"tensor `w`", "inside the data section"});
  expect_rejected(st_bytes(R"({"w":{"dtype":"I8","shape":[0],"data_offsets":[4,2]}})", zeros(4)),
                  {"tensor `w`", "begin <= end", "[4, 2]"});
}

TEST(SafetensorsMalformed, OverlappingOffsets) {
  expect_rejected(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           zeros(8)),
                  {"tensor `b`", "overlapping", "tensor `a`"});
  // Two tensors claiming the same bytes.
  expect_rejected(st_bytes(R"({"a":{"dtype":"I8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})",
                           zeros(4)),
                  {"overlapping"});
}

TEST(SafetensorsMalformed, GapsAndTrailingBytes) {
  // The Rust library rejects data sections the tensors do not tile exactly; so do we.
  expect_rejected(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                           zeros(12)),
                  {"tensor `b`", "gap of 4"});
  expect_rejected(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", zeros(8)),
                  {"tensor `a`", "gap of 4", "data section start"});
  expect_rejected(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", zeros(5)),
                  {"1 trailing bytes", "tensor `a`"});
  expect_rejected(st_bytes("{}", zeros(3)), {"3 trailing bytes"});
}

TEST(SafetensorsMalformed, BadMetadata) {
  expect_rejected(st_bytes(R"({"__metadata__":{"k":1}})", ""), {"`__metadata__`", "key `k`", "string"});
  expect_rejected(st_bytes(R"({"__metadata__":{"k":{"a":"b"}}})", ""), {"`__metadata__`", "key `k`"});
  expect_rejected(st_bytes(R"({"__metadata__":"x"})", ""), {"`__metadata__`", "object of strings"});
}

// ---------------------------------------------------------------- atomic writes

TEST(FileIo, WriteAndReadBack) {
  TempDir dir;
  const std::string path = dir.file("a.txt");
  qc::write_file_atomic(path, "first");
  qc::write_file_atomic(path, std::string("second\0with nul", 15));
  EXPECT_EQ(qc::read_file(path), std::string("second\0with nul", 15));
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"a.txt"}));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask) << "output should have default permissions, not mkstemp's 0600";
}

TEST(FileIo, ReadErrorsNameThePathAndErrno) {
  const std::string msg = qc::test::input_error([] { qc::read_file("/nonexistent-dir/x.bin"); });
  EXPECT_NE(msg.find("/nonexistent-dir/x.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  EXPECT_THROW(qc::MappedFile("/nonexistent-dir/x.bin"), qc::Error);
  EXPECT_THROW(qc::read_safetensors("/nonexistent-dir/x.safetensors"), qc::Error);
  TempDir dir;
  EXPECT_THROW(qc::MappedFile(dir.file("")), qc::Error);  // a directory is not a regular file
}

TEST(FileIo, WriteIntoMissingDirectoryCreatesNothing) {
  TempDir dir;
  EXPECT_THROW(qc::write_file_atomic(dir.file("missing/out.txt"), "x"), qc::Error);
  EXPECT_THROW(qc::write_safetensors(dir.file("missing/out.safetensors"), {{"x", Tensor::empty(DType::i8, {1})}}),
               qc::Error);
  EXPECT_TRUE(dir.listing().empty());
}

TEST(FileIo, AbandonedWriterLeavesNothing) {
  TempDir dir;
  {
    qc::AtomicFileWriter w(dir.file("never.bin"));
    w.write(std::string_view("partial"));
    EXPECT_TRUE(fs::exists(w.temp_path()));
  }
  EXPECT_TRUE(dir.listing().empty());
}

// A write that fails half-way (the file-size limit stops it) must leave the destination as it was,
// remove its temporary file and not touch any other file in the directory.
TEST(FileIo, FailedWriteLeavesExistingFilesUntouched) {
  TempDir dir;
  const std::string target = dir.file("model.safetensors");
  const std::string neighbour = dir.file("other.safetensors");
  qc::write_file_atomic(target, "old content");
  qc::write_file_atomic(neighbour, "neighbour content");
  struct stat before {};
  ASSERT_EQ(::stat(neighbour.c_str(), &before), 0);

  Tensor big = Tensor::from_bytes(DType::u8, {1 << 20}, pattern_bytes(1 << 20, 3));
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal
  struct rlimit small = old_limit;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  std::string message;
  try {
    qc::write_safetensors(target, {{"big", big}});
  } catch (const qc::Error& e) {
    threw = true;
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_TRUE(threw) << "a write past the file-size limit did not fail";
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_EQ(qc::read_file(target), "old content");
  EXPECT_EQ(qc::read_file(neighbour), "neighbour content");
  struct stat after {};
  ASSERT_EQ(::stat(neighbour.c_str(), &after), 0);
  EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"model.safetensors", "other.safetensors"}));
}

// ---------------------------------------------------------------- SHA-256

TEST(Sha256, NistVectors) {
  // FIPS 180-2 appendix B examples and the empty message.
  EXPECT_EQ(qc::sha256_hex(std::string_view("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(qc::sha256_hex(std::string_view("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(qc::sha256_hex(std::string_view("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  qc::Sha256 h;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(std::string_view(chunk));
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const std::string abc = "abc";
  EXPECT_EQ(qc::sha256_digest(as_bytes(abc)), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, FileMatchesSha256sum) {
  TempDir dir;
  const std::string path = dir.file("blob.bin");
  auto bytes = pattern_bytes((17 << 20) + 12345, 11);  // spans several 8 MiB read chunks (read ahead while hashing)
  qc::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  if (std::system("command -v sha256sum > /dev/null 2>&1") != 0) GTEST_SKIP() << "SKIPPED: sha256sum is not installed";
  // Quoted: TMPDIR may hold spaces (found by running the tests with TMPDIR="/tmp/qc audit tmp").
  FILE* p = ::popen(("sha256sum '" + path + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char out[65] = {};
  const size_t got = std::fread(out, 1, 64, p);
  const int status = ::pclose(p);
  ASSERT_TRUE(got == 64 && status == 0) << "sha256sum " << path << " failed (status " << status << ")";
  EXPECT_EQ(qc::sha256_file(path), std::string("sha256:") + out);
  EXPECT_EQ(qc::sha256_digest(bytes), std::string("sha256:") + out);
  EXPECT_THROW(qc::sha256_file(dir.file("absent")), qc::Error);
}

// The tree digest (docs/formats.md) recomputed from its definition with coreutils: each 4 KiB leaf's
// digest from `sha256sum` of that leaf, then `sha256sum` of the header, both sizes and the leaves' digests,
// at the edges of the leaf size (an empty file is one empty leaf) and across the tree's 8 MiB reading blocks.
TEST(Sha256, TreeDigestIsItsDefinitionComputedBySha256sum) {
  if (std::system("command -v sha256sum > /dev/null 2>&1") != 0) GTEST_SKIP() << "SKIPPED: sha256sum is not installed";
  TempDir dir;
  const auto sha256sum = [](const std::string& path) {
    FILE* p = ::popen(("sha256sum '" + path + "'").c_str(), "r");
    char out[65] = {};
    const size_t got = p == nullptr ? 0 : std::fread(out, 1, 64, p);
    const int status = p == nullptr ? -1 : ::pclose(p);
    EXPECT_TRUE(got == 64 && status == 0) << "sha256sum " << path;
    std::string raw;
    for (int i = 0; i < 32; ++i) raw.push_back(static_cast<char>(std::stoi(std::string(out + 2 * i, 2), nullptr, 16)));
    return std::pair<std::string, std::string>{raw, std::string(out, 64)};
  };
  const auto le64 = [](uint64_t v) {
    std::string s;
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return s;
  };
  const uint64_t piece = qc::kTreeDigestLeaf;
  ASSERT_EQ(piece, uint64_t{4096});
  for (const uint64_t size : {uint64_t{0}, uint64_t{1}, piece, piece + 1, (uint64_t{8} << 20) + 3 * piece + 17}) {
    const auto bytes = pattern_bytes(size, 5);
    const std::string path = dir.file("blob.bin");
    qc::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    std::string root = std::string("qconform sha256-tree v2", 23) + '\0' + le64(piece) + le64(size);
    // One sha256sum per leaf would be thousands of processes for the largest size: there, the leaves of the
    // first and last 8 MiB block's edges through sha256sum, the rest through qc::Sha256 (checked by it above).
    for (uint64_t at = 0; at < std::max<uint64_t>(size, 1); at += piece) {
      const size_t len = static_cast<size_t>(std::min(piece, size - at));
      const auto* leaf = reinterpret_cast<const char*>(bytes.data()) + at;
      const bool edge = at < 2 * piece || at + 3 * piece >= size || at / (uint64_t{8} << 20) != (at + piece) / (uint64_t{8} << 20);
      if (edge) {
        const std::string part = dir.file("piece.bin");
        qc::write_file_atomic(part, std::string_view(leaf, len));
        root += sha256sum(part).first;
      } else {
        qc::Sha256 h;
        h.update(std::string_view(leaf, len));
        root += h.bytes();
      }
    }
    const std::string root_path = dir.file("root.bin");
    qc::write_file_atomic(root_path, root);
    const std::string tree = qc::sha256_tree_file(path);
    EXPECT_EQ(tree, "sha256-tree:" + sha256sum(root_path).second) << size << " bytes";
    EXPECT_TRUE(qc::is_digest(tree, "sha256-tree:")) << tree;
    EXPECT_FALSE(qc::is_digest(tree)) << tree;  // not a plain digest
    if (size == piece + 1) {
      EXPECT_EQ(root.size(), 24u + 16u + 64u);  // two leaves
    }
  }
  EXPECT_THROW(qc::sha256_tree_file(dir.file("absent")), qc::Error);
}

// QC_DIGEST_RECORD set to `record` for a test, restored after it.
struct RecordEnv {
  std::string record;
  std::optional<std::string> was;
  explicit RecordEnv(std::string folder) : record(std::move(folder)) {
    if (const char* v = std::getenv("QC_DIGEST_RECORD")) was = v;
    ::setenv("QC_DIGEST_RECORD", record.c_str(), 1);
  }
  ~RecordEnv() { was ? ::setenv("QC_DIGEST_RECORD", was->c_str(), 1) : ::unsetenv("QC_DIGEST_RECORD"); }
  RecordEnv(const RecordEnv&) = delete;
  RecordEnv& operator=(const RecordEnv&) = delete;
};

// Leaves given to the tree (verify's device pipeline hashes the arrays it uploads) are taken instead of
// read: the right digests give the file's tree digest, a wrong one a different digest (so they were used),
// and leaves given for a file of another size are refused as a changed file.
TEST(Sha256, TreeDigestTakesTheLeavesGivenAndReadsTheRest) {
  TempDir dir;
  const uint64_t leaf = qc::kTreeDigestLeaf;
  const uint64_t size = (uint64_t{8} << 20) + 20 * leaf + 123;  // two reading blocks, the last leaf short
  const auto bytes = pattern_bytes(size, 17);
  const std::string path = dir.file("blob.bin");
  qc::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  const std::string tree = qc::sha256_tree_file(path);
  const auto digest_of = [&](uint64_t i) {
    qc::Sha256 h;
    h.update(std::span<const std::byte>(bytes.data() + i * leaf, std::min(leaf, size - i * leaf)));
    return h.bytes();
  };
  qc::TreeLeaves given(size);
  ASSERT_EQ(given.count(), (size + leaf - 1) / leaf);
  // Runs of given leaves at the start, across the blocks' edge and at the end, one alone in between.
  for (const auto [first, n] : std::vector<std::pair<uint64_t, uint64_t>>{{0, 3}, {2040, 16}, {2060, 1}, {given.count() - 2, 2}}) {
    std::string run;
    for (uint64_t i = first; i < first + n; ++i) run += digest_of(i);
    given.put(first, n, reinterpret_cast<const unsigned char*>(run.data()));
  }
  EXPECT_EQ(given.given_count(), 22u);
  EXPECT_EQ(qc::sha256_tree_file(path, 3, &given), tree);
  EXPECT_EQ(qc::sha256_tree_file(path, 1, &given), tree);
  std::string wrong = digest_of(2060);
  wrong[0] = static_cast<char>(wrong[0] ^ 1);
  given.put(2060, 1, reinterpret_cast<const unsigned char*>(wrong.data()));
  EXPECT_EQ(given.given_count(), 22u);  // the same leaf given again
  EXPECT_NE(qc::sha256_tree_file(path, 0, &given), tree);
  qc::TreeLeaves other_size(size + 1);
  EXPECT_THROW(qc::sha256_tree_file(path, 0, &other_size), qc::Error);
  EXPECT_THROW(given.put(given.count() - 1, 2, reinterpret_cast<const unsigned char*>(wrong.data())), qc::Error);
}

// A view into a registered mapping finds its file's leaves and its offset, until the registration is
// dropped; a view that leaves the mapping finds nothing. `whole_leaves` names the leaves inside a range.
TEST(Sha256, MappedLeavesAreFoundByTheirViewsWhileRegistered) {
  std::vector<unsigned char> mapping(3 * qc::kTreeDigestLeaf + 100);
  auto leaves = std::make_shared<qc::TreeLeaves>(mapping.size());
  auto keep = std::make_shared<int>(7);
  {
    const auto handle = qc::register_mapped_leaves(mapping.data(), mapping.size(), leaves, keep);
    EXPECT_EQ(keep.use_count(), 2);  // the registration holds the mapping's owner
    const auto found = qc::find_mapped_leaves(mapping.data() + 4000, 5000);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->leaves, leaves);
    EXPECT_EQ(found->offset, 4000u);
    EXPECT_TRUE(qc::find_mapped_leaves(mapping.data(), mapping.size()).has_value());
    EXPECT_FALSE(qc::find_mapped_leaves(mapping.data() + 1, mapping.size()).has_value());
    EXPECT_FALSE(qc::find_mapped_leaves(mapping.data() - 1, 2).has_value());
    EXPECT_THROW(qc::register_mapped_leaves(mapping.data(), mapping.size(), leaves, keep), qc::Error);
  }
  EXPECT_FALSE(qc::find_mapped_leaves(mapping.data() + 4000, 5000).has_value());
  EXPECT_EQ(keep.use_count(), 1);
  const uint64_t leaf = qc::kTreeDigestLeaf;
  const qc::WholeLeaves w = qc::whole_leaves(4000, 3 * leaf);  // [4000, 16288): leaves 1 and 2 whole
  EXPECT_EQ(w.first, 1u);
  EXPECT_EQ(w.count, 2u);
  EXPECT_EQ(w.skip, 96u);
  EXPECT_EQ(qc::whole_leaves(0, leaf).count, 1u);
  EXPECT_EQ(qc::whole_leaves(1, leaf).count, 0u);
  EXPECT_EQ(qc::whole_leaves(leaf, leaf - 1).count, 0u);
}

// The digest record with leaves given (verify's device pipeline): begun before the leaves arrive, finished
// after; right leaves give the file's tree digest and the pair is recorded; a wrong leaf gives another tree
// digest, the plain digest is still the file's, and nothing is recorded under the wrong tree (the host's own
// reading of the tree does not equal it). Dropped uncalled, it abandons its plain read.
TEST(Sha256, DigestRecordWithGivenLeavesRecordsOnlyTheFilesOwnTree) {
  TempDir dir;
  const RecordEnv env(dir.file("record"));
  const std::string& record = env.record;
  const uint64_t leaf = qc::kTreeDigestLeaf;
  const auto bytes = pattern_bytes(40 * leaf + 9, 23);
  const std::string path = dir.file("ops.bin");
  qc::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  const std::string plain = qc::sha256_file(path), tree = qc::sha256_tree_file(path);
  const auto leaf_digest = [&](uint64_t i, bool wrong) {
    qc::Sha256 h;
    h.update(std::span<const std::byte>(bytes.data() + i * leaf, leaf));
    std::string d = h.bytes();
    if (wrong) d[5] = static_cast<char>(d[5] ^ 0x10);
    return d;
  };
  for (const bool wrong : {true, false}) {
    auto given = std::make_shared<qc::TreeLeaves>(bytes.size());
    auto finish = qc::sha256_file_recorded_begun(path, 2, given);
    for (uint64_t i = 3; i < 30; ++i) {
      given->put(i, 1, reinterpret_cast<const unsigned char*>(leaf_digest(i, wrong && i == 17).data()));
    }
    const qc::FileDigests d = finish();
    EXPECT_EQ(d.sha256, plain) << wrong;
    EXPECT_FALSE(d.from_record) << wrong;
    EXPECT_EQ(d.sha256_tree == tree, !wrong);
    EXPECT_EQ(fs::exists(record + "/" + d.sha256_tree.substr(12)), !wrong) << d.sha256_tree;
  }
  const qc::FileDigests hit = qc::sha256_file_recorded_begun(path, 2, std::make_shared<qc::TreeLeaves>(bytes.size()))();
  EXPECT_TRUE(hit.from_record);
  EXPECT_EQ(hit.sha256, plain);
  auto dropped = qc::sha256_file_recorded_begun(path, 2, nullptr);  // never called: its destructor stops the read
}

// The digest record (docs/formats.md, "Digest record"): a miss reads both digests and records the pair, a
// hit takes the plain digest from the record (and it is the file's, by `sha256_file`), a changed file
// misses, and nothing but a well-formed entry of this user's, writable by nobody else, is believed.
TEST(Sha256, DigestRecordGivesThePlainDigestOfTheSameBytesOnly) {
  TempDir dir;
  const RecordEnv env(dir.file("record"));
  const std::string& record = env.record;
  ASSERT_EQ(qc::digest_record_dir(), record);
  const std::string path = dir.file("ops.bin");
  auto bytes = pattern_bytes((uint64_t{64} << 20) + 4097, 11);  // two tree pieces
  const auto write = [&] {
    qc::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  };
  write();
  const std::string plain = qc::sha256_file(path), tree = qc::sha256_tree_file(path);

  const qc::FileDigests miss = qc::sha256_file_recorded(path);
  EXPECT_EQ(miss.sha256, plain);
  EXPECT_EQ(miss.sha256_tree, tree);
  EXPECT_FALSE(miss.from_record);
  const std::string entry = record + "/" + tree.substr(12);
  ASSERT_TRUE(fs::exists(entry)) << entry;
  EXPECT_EQ(fs::status(record).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(entry).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(qc::read_file(entry), plain + "\n");

  const qc::FileDigests hit = qc::sha256_file_recorded(path);
  EXPECT_EQ(hit.sha256, plain);
  EXPECT_EQ(hit.sha256_tree, tree);
  EXPECT_TRUE(hit.from_record);

  // Under umask 002 (group-writable files by default) an entry is still 0600, so the next run finds it; a
  // trailing slash names the same folder.
  fs::remove(entry);
  const mode_t old_mask = ::umask(002);
  const qc::FileDigests under_002 = qc::sha256_file_recorded(path);
  ::umask(old_mask);
  EXPECT_FALSE(under_002.from_record);
  EXPECT_EQ(fs::status(entry).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  ::setenv("QC_DIGEST_RECORD", (record + "//").c_str(), 1);
  EXPECT_EQ(qc::digest_record_dir(), record);
  EXPECT_TRUE(qc::sha256_file_recorded(path).from_record);
  for (const char* off : {"off", "OFF", "0", "false", "No", "none", ""}) {
    ::setenv("QC_DIGEST_RECORD", off, 1);
    EXPECT_EQ(qc::digest_record_dir(), "") << off;
  }
  ::setenv("QC_DIGEST_RECORD", record.c_str(), 1);

  // One byte changed in the second piece, same size: another tree digest, the plain digest read again.
  bytes[(uint64_t{64} << 20) + 7] ^= std::byte{1};
  write();
  const qc::FileDigests changed = qc::sha256_file_recorded(path);
  EXPECT_FALSE(changed.from_record);
  EXPECT_EQ(changed.sha256, qc::sha256_file(path));
  EXPECT_NE(changed.sha256, plain);
  EXPECT_NE(changed.sha256_tree, tree);

  // Entries that are not believed: malformed, group-writable, a symbolic link. Each is read past (the
  // plain digest read again, correct) and a malformed or group-writable one is replaced by the right pair.
  const std::string forged = "sha256:" + std::string(64, '0');
  bytes[(uint64_t{64} << 20) + 7] ^= std::byte{1};  // back to the first bytes, whose pair is `plain`, `tree`
  const auto not_believed = [&](const std::string& why, auto&& make) {
    fs::remove(entry);
    make();
    const qc::FileDigests d = qc::sha256_file_recorded(path);
    EXPECT_FALSE(d.from_record) << why;
    EXPECT_EQ(d.sha256, qc::sha256_file(path)) << why;
  };
  write();
  ASSERT_EQ(qc::sha256_file(path), plain);
  not_believed("malformed", [&] { qc::write_file_atomic(entry, "sha256:" + std::string(63, 'a') + "\n\n"); });
  EXPECT_EQ(qc::read_file(entry), plain + "\n");
  not_believed("upper-case hex", [&] { qc::write_file_atomic(entry, "sha256:" + std::string(64, 'A') + "\n"); });
  not_believed("group-writable", [&] {
    qc::write_file_atomic(entry, forged + "\n");
    fs::permissions(entry, fs::perms::group_write, fs::perm_options::add);
  });
  EXPECT_EQ(qc::read_file(entry), plain + "\n");
  not_believed("a symbolic link", [&] {
    qc::write_file_atomic(dir.file("elsewhere"), forged + "\n");
    fs::create_symlink(dir.file("elsewhere"), entry);
  });

  // A record folder writable by others is not used (its entries could be anybody's); nor is one with `off`.
  fs::permissions(record, fs::perms::others_write, fs::perm_options::add);
  const qc::FileDigests open_dir = qc::sha256_file_recorded(path);
  EXPECT_TRUE(open_dir.sha256_tree.empty());
  EXPECT_EQ(open_dir.sha256, plain);
  ::setenv("QC_DIGEST_RECORD", "off", 1);
  EXPECT_EQ(qc::digest_record_dir(), "");
  const qc::FileDigests off = qc::sha256_file_recorded(path);
  EXPECT_TRUE(off.sha256_tree.empty());
  EXPECT_FALSE(off.from_record);
  EXPECT_EQ(off.sha256, plain);
}
