// Tensor bookkeeping: dtype tables, ownership, read-only views, strides, gathers.
// Run: ./build/tests/qconform_unit_tests --gtest_filter='Tensor*:DType*'
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <set>

#include "core/tensor.hpp"

using qc::DType;
using qc::Tensor;

namespace {

// Expected facts written out by hand from the safetensors spec and our naming convention, not
// read back from the implementation's table.
struct DTypeCase {
  DType dtype;
  size_t size;
  const char* name;
  const char* safetensors;
};
const DTypeCase kCases[] = {
    {DType::u8, 1, "u8", "U8"},       {DType::i8, 1, "i8", "I8"},           {DType::i16, 2, "i16", "I16"},
    {DType::i32, 4, "i32", "I32"},    {DType::i64, 8, "i64", "I64"},        {DType::f16, 2, "f16", "F16"},
    {DType::bf16, 2, "bf16", "BF16"}, {DType::f32, 4, "f32", "F32"},        {DType::f64, 8, "f64", "F64"},
    {DType::e4m3, 1, "e4m3", "F8_E4M3"}, {DType::e5m2, 1, "e5m2", "F8_E5M2"}, {DType::boolean, 1, "bool", "BOOL"},
    {DType::u16, 2, "u16", "U16"},    {DType::u32, 4, "u32", "U32"},        {DType::u64, 8, "u64", "U64"},
};

bool is_internal_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const qc::Error& e) {
    return e.kind() == qc::ErrorKind::internal;
  }
  return false;
}

}  // namespace

TEST(DType, NamesAndSizesMatchTheSpec) {
  ASSERT_EQ(std::size(kCases), std::size(qc::kAllDTypes));
  std::set<DType> covered;
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.name);
    covered.insert(c.dtype);
    EXPECT_EQ(qc::dtype_size(c.dtype), c.size);
    EXPECT_EQ(qc::dtype_name(c.dtype), c.name);
    EXPECT_EQ(qc::dtype_safetensors_name(c.dtype), c.safetensors);
    EXPECT_EQ(qc::dtype_from_name(c.name), c.dtype);
    EXPECT_EQ(qc::dtype_from_safetensors(c.safetensors), c.dtype);
  }
  EXPECT_EQ(covered.size(), std::size(qc::kAllDTypes));
  EXPECT_FALSE(qc::dtype_from_name("F32").has_value());  // names are case-sensitive
  EXPECT_FALSE(qc::dtype_from_safetensors("f32").has_value());
  EXPECT_FALSE(qc::dtype_from_safetensors("C64").has_value());
  EXPECT_FALSE(qc::dtype_from_name("").has_value());
}

TEST(Tensor, DefaultIsEmpty) {
  Tensor t;
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
  EXPECT_TRUE(t.is_contiguous());
}

TEST(Tensor, EmptyIsZeroFilledAndContiguous) {
  Tensor t = Tensor::empty(DType::i32, {3, 4, 5});
  EXPECT_EQ(t.numel(), 60);
  EXPECT_EQ(t.nbytes(), 240u);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{20, 5, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(t.is_writable());
  for (std::byte b : t.bytes()) ASSERT_EQ(b, std::byte{0});
  Tensor scalar = Tensor::empty(DType::f64, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.nbytes(), 8u);
  Tensor zero = Tensor::empty(DType::f32, {0, 7});
  EXPECT_EQ(zero.numel(), 0);
  EXPECT_EQ(zero.bytes().size(), 0u);
}

TEST(Tensor, DataChecksElementSize) {
  Tensor t = Tensor::empty(DType::bf16, {4});
  EXPECT_NO_THROW(t.data<uint16_t>());
  EXPECT_TRUE(is_internal_error([&] { t.data<float>(); }));
  EXPECT_TRUE(is_internal_error([&] { t.data<int8_t>(); }));
  const Tensor& ct = t;
  EXPECT_TRUE(is_internal_error([&] { ct.data<uint32_t>(); }));
}

TEST(Tensor, FromBytesCopiesAndChecksLength) {
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 7.0f};
  std::span<const std::byte> raw(reinterpret_cast<const std::byte*>(values.data()), values.size() * 4);
  Tensor t = Tensor::from_bytes(DType::f32, {2, 3}, raw);
  values[0] = 99.0f;  // the tensor owns a copy
  EXPECT_EQ(t.data<float>()[0], 1.5f);
  EXPECT_EQ(t.data<float>()[5], 7.0f);
  EXPECT_TRUE(is_internal_error([&] { Tensor::from_bytes(DType::f32, {2, 2}, raw); }));
}

TEST(Tensor, BorrowedViewsAreReadOnlyAndKeepTheirOwnerAlive) {
  auto owner = std::make_shared<std::vector<int8_t>>(std::vector<int8_t>{1, -2, 3, -4, 5, -6});
  std::weak_ptr<std::vector<int8_t>> watch = owner;
  Tensor t = Tensor::borrow(DType::i8, {2, 3}, reinterpret_cast<const std::byte*>(owner->data()), owner);
  owner.reset();
  ASSERT_FALSE(watch.expired()) << "the view must keep its owner alive";
  EXPECT_FALSE(t.is_writable());
  const Tensor& ct = t;
  EXPECT_EQ(ct.data<int8_t>()[3], -4);
  EXPECT_TRUE(is_internal_error([&] { t.data<int8_t>(); }));
  EXPECT_TRUE(is_internal_error([&] { t.mutable_bytes(); }));
  Tensor c = t.clone();
  EXPECT_TRUE(c.is_writable());
  c.data<int8_t>()[3] = 100;
  EXPECT_EQ(ct.data<int8_t>()[3], -4);
  t = Tensor();
  c = Tensor();
  EXPECT_TRUE(watch.expired()) << "dropping the last view must release the owner";
}

TEST(Tensor, RowViewsShareStorage) {
  Tensor t = Tensor::empty(DType::i32, {3, 4});
  auto d = t.mutable_span<int32_t>();
  for (int i = 0; i < 12; ++i) d[i] = 10 * (i / 4) + (i % 4);
  Tensor r = t.row(2);
  ASSERT_EQ(r.shape(), (std::vector<int64_t>{4}));
  EXPECT_TRUE(r.is_contiguous());
  for (int j = 0; j < 4; ++j) EXPECT_EQ(r.span<int32_t>()[j], 20 + j);
  r.data<int32_t>()[1] = -7;  // a view, not a copy
  EXPECT_EQ(t.span<int32_t>()[9], -7);
  EXPECT_TRUE(is_internal_error([&] { t.row(3); }));
  EXPECT_TRUE(is_internal_error([&] { r.row(0); }));
}

TEST(Tensor, TransposedGathersInCOrder) {
  const int64_t rows = 5, cols = 7;
  Tensor t = Tensor::empty(DType::f64, {rows, cols});
  auto d = t.mutable_span<double>();
  for (int64_t i = 0; i < rows * cols; ++i) d[i] = static_cast<double>(i) * 0.5;
  Tensor tt = t.transposed();
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_TRUE(is_internal_error([&] { tt.bytes(); }));
  Tensor c = tt.contiguous();
  ASSERT_TRUE(c.is_contiguous());
  ASSERT_EQ(c.shape(), (std::vector<int64_t>{cols, rows}));
  // Expected element (j, i) of the transpose is element (i, j) of the original, computed directly.
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) {
      ASSERT_EQ(c.span<double>()[j * rows + i], static_cast<double>(i * cols + j) * 0.5) << "at (" << j << "," << i << ")";
    }
  }
  // A row of the transpose is a strided (non-contiguous) column of the original.
  Tensor col = tt.row(3);
  EXPECT_FALSE(col.is_contiguous());
  Tensor colc = col.contiguous();
  for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(colc.span<double>()[i], static_cast<double>(i * cols + 3) * 0.5);
}

TEST(Tensor, ContiguousSharesAndCloneCopies) {
  Tensor t = Tensor::empty(DType::u16, {2, 2});
  Tensor same = t.contiguous();
  Tensor copy = t.clone();
  t.data<uint16_t>()[0] = 0xBEEF;
  EXPECT_EQ(same.data<uint16_t>()[0], 0xBEEF);
  EXPECT_EQ(copy.data<uint16_t>()[0], 0);
}

TEST(Tensor, SizeOneAxesDoNotBreakContiguity) {
  Tensor t = Tensor::empty(DType::f32, {1, 6});
  EXPECT_TRUE(t.transposed().is_contiguous());
  Tensor v = t.as_strided({6, 1}, {1, 12345});
  EXPECT_TRUE(v.is_contiguous());
}

TEST(Tensor, ReshapedAndAsStridedAreChecked) {
  Tensor t = Tensor::empty(DType::i8, {4, 6});
  EXPECT_EQ(t.reshaped({2, 12}).strides(), (std::vector<int64_t>{12, 1}));
  EXPECT_TRUE(is_internal_error([&] { t.reshaped({5, 5}); }));
  EXPECT_TRUE(is_internal_error([&] { t.as_strided({4, 6}, {7, 1}); }));  // reaches element 26 of 24
  EXPECT_NO_THROW(t.as_strided({6, 4}, {1, 6}));
  EXPECT_TRUE(is_internal_error([&] { t.transposed().reshaped({24}); }));
}

TEST(Tensor, CheckedNumelRejectsNegativeAndOverflow) {
  EXPECT_EQ(qc::checked_numel(std::vector<int64_t>{2, 3, 4}), 24);
  EXPECT_EQ(qc::checked_numel(std::vector<int64_t>{}), 1);
  EXPECT_FALSE(qc::checked_numel(std::vector<int64_t>{2, -3}).has_value());
  EXPECT_FALSE(qc::checked_numel(std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32}).has_value());
  EXPECT_FALSE(qc::checked_numel(std::vector<int64_t>{int64_t{1} << 61}, 8).has_value());
  EXPECT_EQ(qc::checked_numel(std::vector<int64_t>{int64_t{1} << 61}, 2), int64_t{1} << 61);
}

TEST(Tensor, DescribeNamesDtypeAndShape) {
  EXPECT_EQ(Tensor::empty(DType::bf16, {4, 8}).describe(), "bf16[4, 8]");
  EXPECT_EQ(Tensor::empty(DType::e4m3, {}).describe(), "e4m3[]");
}
