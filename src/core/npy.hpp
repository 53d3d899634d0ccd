// NumPy `.npy` files (format versions 1.0, 2.0 and 3.0 read; 1.0, or 2.0 when the header is
// too large for 1.0, written). See numpy/lib/format.py.
//
// Reading: the header dict must hold exactly `descr`, `fortran_order` and `shape`; `descr` is a
// simple type string (`<f4`, `|i1`, `>i4`, `|b1`, ...), structured and object dtypes are
// rejected. Big-endian data is byte-swapped and Fortran-ordered data reordered into a
// contiguous C-order tensor; otherwise the tensor is a zero-copy view of the memory-mapped file.
// The file must hold exactly numel × element size bytes after the header: short data and
// trailing bytes are both errors (numpy ignores trailing bytes; qconform is strict).
//
// bf16 and fp8 have no NumPy type of their own: `np.save` writes ml_dtypes arrays as `<V2`
// (bfloat16), `<V1` (float8_e4m3fn) and `<f1` (float8_e5m2, which np.load cannot read back).
// Reading any of these needs `opaque_as` to say what the bytes are. Writing bf16 and e4m3
// produces exactly what `np.save` produces for the ml_dtypes array; e5m2 is written as `<V1`
// so numpy can load it (`np.load(f).view(ml_dtypes.float8_e5m2)`).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.hpp"

namespace qc {

Tensor parse_npy(std::span<const std::byte> bytes, std::string_view name_for_errors,
                 std::shared_ptr<const void> keep_alive = nullptr, std::optional<DType> opaque_as = std::nullopt);
Tensor read_npy(const std::string& path, std::optional<DType> opaque_as = std::nullopt);

// The bytes `np.save` writes for this tensor (little-endian, C order, header padded to 64 bytes).
std::string serialize_npy(const Tensor& tensor);
// Atomic write of `serialize_npy(tensor)`.
void write_npy(const std::string& path, const Tensor& tensor);

// True when `bytes` start with the `.npy` magic string `\x93NUMPY`.
bool is_npy(std::span<const std::byte> bytes);

}  // namespace qc
