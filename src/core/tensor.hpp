// `Tensor`: a dtype, a shape, strides and bytes, owned or borrowed from a memory-mapped file.
// Bookkeeping, not algebra: no arithmetic lives here.
//
// Bytes are little-endian, elements are addressed with strides counted in elements. Floating
// types without a C++ type (bf16, f16, e4m3, e5m2) are read as their raw bit patterns
// (`uint16_t`, `uint8_t`); `numerics.hpp` converts them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/error.hpp"

namespace qc {

enum class DType : uint8_t { u8, i8, i16, i32, i64, f16, bf16, f32, f64, e4m3, e5m2, boolean, u16, u32, u64 };

inline constexpr DType kAllDTypes[] = {DType::u8,  DType::i8,   DType::i16,  DType::i32,     DType::i64,
                                       DType::f16, DType::bf16, DType::f32,  DType::f64,     DType::e4m3,
                                       DType::e5m2, DType::boolean, DType::u16, DType::u32, DType::u64};

// Bytes per element.
size_t dtype_size(DType dtype);
// Our short names: `u8 i8 i16 i32 i64 u16 u32 u64 f16 bf16 f32 f64 e4m3 e5m2 bool`.
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);
// The safetensors names: `U8 I8 I16 I32 I64 U16 U32 U64 F16 BF16 F32 F64 F8_E4M3 F8_E5M2 BOOL`.
std::string_view dtype_safetensors_name(DType dtype);
std::optional<DType> dtype_from_safetensors(std::string_view name);
// "[2, 3]"
std::string shape_string(std::span<const int64_t> shape);

class Tensor {
 public:
  // An empty f32 tensor of shape [0] with no storage.
  Tensor();

  // Owned, zero-filled, contiguous.
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  // Owned copy of `bytes`, which must hold exactly numel × dtype size bytes (C order).
  static Tensor from_bytes(DType dtype, std::vector<int64_t> shape, std::span<const std::byte> bytes);
  // A read-only contiguous view of `data`; `owner` keeps the memory alive (a mapped file).
  // `data` must hold numel × dtype size bytes.
  static Tensor borrow(DType dtype, std::vector<int64_t> shape, const std::byte* data,
                       std::shared_ptr<const void> owner);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }  // in elements
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t axis) const;
  int64_t numel() const;
  // numel × dtype size: the size of the tensor's logical content, whatever its strides.
  size_t nbytes() const;
  size_t element_size() const { return dtype_size(dtype_); }
  bool is_contiguous() const;
  // False for views of a memory-mapped file (mutate a `clone()` instead).
  bool is_writable() const { return writable_; }

  // Typed pointer to the first element; QC_CHECK that sizeof(T) is the dtype's size and that the
  // pointer is aligned for T. The non-const overload needs a writable tensor.
  template <class T>
  T* data() {
    check_access(sizeof(T), alignof(T), /*write=*/true);
    return reinterpret_cast<T*>(ptr_);
  }
  template <class T>
  const T* data() const {
    check_access(sizeof(T), alignof(T), /*write=*/false);
    return reinterpret_cast<const T*>(ptr_);
  }
  // Typed span over a contiguous tensor's elements.
  template <class T>
  std::span<const T> span() const {
    QC_CHECK(is_contiguous(), "Tensor::span on a non-contiguous {} tensor of shape {}", dtype_name(dtype_),
             shape_string(shape_));
    return {data<T>(), static_cast<size_t>(numel())};
  }
  template <class T>
  std::span<T> mutable_span() {
    QC_CHECK(is_contiguous(), "Tensor::mutable_span on a non-contiguous {} tensor of shape {}", dtype_name(dtype_),
             shape_string(shape_));
    return {data<T>(), static_cast<size_t>(numel())};
  }

  // The content bytes of a contiguous tensor (QC_CHECK otherwise; call `contiguous()` first).
  std::span<const std::byte> bytes() const;
  std::span<std::byte> mutable_bytes();

  // This tensor if it is contiguous (sharing storage), else a contiguous owned copy.
  Tensor contiguous() const;
  // A contiguous owned, writable deep copy.
  Tensor clone() const;
  // Row `i` of a 2-D tensor as a 1-D view sharing storage.
  Tensor row(int64_t i) const;
  // The transpose of a 2-D tensor as a view sharing storage (non-contiguous unless a dim is 1).
  Tensor transposed() const;
  // A view with a new shape of the same numel; the tensor must be contiguous.
  Tensor reshaped(std::vector<int64_t> shape) const;
  // A view of this contiguous tensor's storage with explicit shape and (non-negative) strides;
  // QC_CHECK that every addressed element lies inside this tensor.
  Tensor as_strided(std::vector<int64_t> shape, std::vector<int64_t> strides) const;

  // "bf16[4, 8]"
  std::string describe() const;

 private:
  void check_access(size_t size, size_t align, bool write) const;

  DType dtype_ = DType::f32;
  std::vector<int64_t> shape_{0};
  std::vector<int64_t> strides_{1};
  std::shared_ptr<const void> storage_;  // keeps `ptr_` alive (owned bytes or a mapping)
  std::byte* ptr_ = nullptr;
  bool writable_ = true;
};

// C-order strides (in elements) for `shape`.
std::vector<int64_t> contiguous_strides(std::span<const int64_t> shape);
// Product of `shape`, or nullopt when an entry is negative or the product (or the product times
// `element_size`) overflows int64.
std::optional<int64_t> checked_numel(std::span<const int64_t> shape, size_t element_size = 1);

}  // namespace qc
