#include "core/tensor.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>

namespace qc {

namespace {

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;
  std::string_view safetensors;
};

// One table drives every name lookup, so the three spellings of a dtype cannot drift apart.
constexpr DTypeInfo kDTypeInfo[] = {
    {DType::u8, 1, "u8", "U8"},         {DType::i8, 1, "i8", "I8"},
    {DType::i16, 2, "i16", "I16"},      {DType::i32, 4, "i32", "I32"},
    {DType::i64, 8, "i64", "I64"},      {DType::f16, 2, "f16", "F16"},
    {DType::bf16, 2, "bf16", "BF16"},   {DType::f32, 4, "f32", "F32"},
    {DType::f64, 8, "f64", "F64"},      {DType::e4m3, 1, "e4m3", "F8_E4M3"},
    {DType::e5m2, 1, "e5m2", "F8_E5M2"}, {DType::boolean, 1, "bool", "BOOL"},
    {DType::u16, 2, "u16", "U16"},      {DType::u32, 4, "u32", "U32"},
    {DType::u64, 8, "u64", "U64"},
};
static_assert(std::size(kDTypeInfo) == std::size(kAllDTypes));

constexpr const DTypeInfo& info(DType dtype) {
  for (const DTypeInfo& i : kDTypeInfo) {
    if (i.dtype == dtype) return i;
  }
  return kDTypeInfo[0];  // unreachable for valid enumerators
}
static_assert(info(DType::bf16).size == 2 && info(DType::e4m3).size == 1 && info(DType::u64).size == 8);

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::string_view dtype_safetensors_name(DType dtype) { return info(dtype).safetensors; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& i : kDTypeInfo) {
    if (i.name == name) return i.dtype;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const DTypeInfo& i : kDTypeInfo) {
    if (i.safetensors == name) return i.dtype;
  }
  return std::nullopt;
}

std::string shape_string(std::span<const int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::vector<int64_t> contiguous_strides(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

std::optional<int64_t> checked_numel(std::span<const int64_t> shape, size_t element_size) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(element_size), &bytes)) return std::nullopt;
  return n;
}

Tensor::Tensor() = default;

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
  const auto n = checked_numel(shape, dtype_size(dtype));
  QC_CHECK(n.has_value(), "Tensor::empty: invalid shape {} for {}", shape_string(shape), dtype_name(dtype));
  const size_t bytes = static_cast<size_t>(*n) * dtype_size(dtype);
  // `new std::byte[]()` zero-fills; one spare byte keeps the pointer non-null for empty tensors.
  std::shared_ptr<std::byte[]> storage(new std::byte[bytes + 1]());
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.ptr_ = storage.get();
  t.storage_ = std::move(storage);
  t.writable_ = true;
  return t;
}

Tensor Tensor::from_bytes(DType dtype, std::vector<int64_t> shape, std::span<const std::byte> bytes) {
  Tensor t = empty(dtype, std::move(shape));
  QC_CHECK(bytes.size() == t.nbytes(), "Tensor::from_bytes: {} needs {} bytes, got {}", t.describe(), t.nbytes(),
           bytes.size());
  if (!bytes.empty()) std::memcpy(t.ptr_, bytes.data(), bytes.size());
  return t;
}

Tensor Tensor::borrow(DType dtype, std::vector<int64_t> shape, const std::byte* data,
                      std::shared_ptr<const void> owner) {
  QC_CHECK(checked_numel(shape, dtype_size(dtype)).has_value(), "Tensor::borrow: invalid shape {}",
           shape_string(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  // The view is read-only (`writable_ = false`); the const_cast only lets one pointer type serve
  // both kinds of tensor.
  t.ptr_ = const_cast<std::byte*>(data);
  t.storage_ = std::move(owner);
  t.writable_ = false;
  return t;
}

int64_t Tensor::dim(int64_t axis) const {
  QC_CHECK(axis >= 0 && axis < ndim(), "Tensor::dim({}) of a {}-D tensor", axis, ndim());
  return shape_[static_cast<size_t>(axis)];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * element_size(); }

bool Tensor::is_contiguous() const {
  // Strides of size-1 axes never matter, and an empty tensor has no layout to speak of.
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void Tensor::check_access(size_t size, size_t align, bool write) const {
  QC_CHECK(size == element_size(), "Tensor::data<T>: sizeof(T) = {} but the tensor is {} ({} bytes per element)",
           size, describe(), element_size());
  QC_CHECK(reinterpret_cast<uintptr_t>(ptr_) % align == 0, "Tensor::data<T>: {} data is not aligned to {} bytes",
           describe(), align);
  QC_CHECK(!write || writable_,
           "Tensor::data<T>: {} is a read-only view of a mapped file; use a const reference to read it or clone() it "
           "to modify it",
           describe());
}

std::span<const std::byte> Tensor::bytes() const {
  QC_CHECK(is_contiguous(), "Tensor::bytes on non-contiguous {} (strides {}); call contiguous() first", describe(),
           shape_string(strides_));
  return {ptr_, nbytes()};
}

std::span<std::byte> Tensor::mutable_bytes() {
  QC_CHECK(writable_, "Tensor::mutable_bytes: {} is a read-only view of a mapped file", describe());
  QC_CHECK(is_contiguous(), "Tensor::mutable_bytes on non-contiguous {}", describe());
  return {ptr_, nbytes()};
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(dtype_, shape_);
  const int64_t n = numel();
  if (n == 0) return out;
  const size_t es = element_size();
  if (is_contiguous()) {
    std::memcpy(out.ptr_, ptr_, nbytes());
    return out;
  }
  // Walk the source in C order with an odometer over the indices; the destination is dense.
  std::vector<int64_t> index(shape_.size(), 0);
  std::byte* dst = out.ptr_;
  for (int64_t e = 0; e < n; ++e) {
    int64_t offset = 0;
    for (size_t a = 0; a < shape_.size(); ++a) offset += index[a] * strides_[a];
    std::memcpy(dst, ptr_ + offset * static_cast<int64_t>(es), es);
    dst += es;
    for (size_t a = shape_.size(); a-- > 0;) {
      if (++index[a] < shape_[a]) break;
      index[a] = 0;
    }
  }
  return out;
}

Tensor Tensor::row(int64_t i) const {
  QC_CHECK(ndim() == 2, "Tensor::row on {} (expected a 2-D tensor)", describe());
  QC_CHECK(i >= 0 && i < shape_[0], "Tensor::row({}) of {}", i, describe());
  Tensor t = *this;
  t.ptr_ = ptr_ + i * strides_[0] * static_cast<int64_t>(element_size());
  t.shape_ = {shape_[1]};
  t.strides_ = {strides_[1]};
  return t;
}

Tensor Tensor::transposed() const {
  QC_CHECK(ndim() == 2, "Tensor::transposed on {} (expected a 2-D tensor)", describe());
  Tensor t = *this;
  t.shape_ = {shape_[1], shape_[0]};
  t.strides_ = {strides_[1], strides_[0]};
  return t;
}

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  QC_CHECK(is_contiguous(), "Tensor::reshaped on non-contiguous {}", describe());
  const auto n = checked_numel(shape, element_size());
  QC_CHECK(n.has_value() && *n == numel(), "Tensor::reshaped: {} cannot take shape {}", describe(),
           shape_string(shape));
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::as_strided(std::vector<int64_t> shape, std::vector<int64_t> strides) const {
  QC_CHECK(is_contiguous(), "Tensor::as_strided on non-contiguous {}", describe());
  QC_CHECK(shape.size() == strides.size(), "Tensor::as_strided: shape {} and strides {} differ in rank",
           shape_string(shape), shape_string(strides));
  const auto n = checked_numel(shape, element_size());
  QC_CHECK(n.has_value(), "Tensor::as_strided: invalid shape {}", shape_string(shape));
  if (*n > 0) {
    int64_t last = 0;  // offset of the last addressed element
    for (size_t a = 0; a < shape.size(); ++a) {
      QC_CHECK(strides[a] >= 0, "Tensor::as_strided: negative stride {}", strides[a]);
      last += (shape[a] - 1) * strides[a];
    }
    QC_CHECK(last < numel(), "Tensor::as_strided: shape {} strides {} reach element {} of {}", shape_string(shape),
             shape_string(strides), last, describe());
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  return t;
}

std::string Tensor::describe() const { return fmt::format("{}{}", dtype_name(dtype_), shape_string(shape_)); }

}  // namespace qc
