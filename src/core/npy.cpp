#include "core/npy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <variant>
#include <vector>

#include "qconform/error.hpp"
#include "core/fileio.hpp"

namespace qc {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kMaxHeader = 1 << 20;  // numpy itself refuses headers above 10,000 bytes by default

// The subset of Python literal syntax `.npy` headers use: a dict of string keys whose values are
// strings, booleans or tuples of integers.
using PyValue = std::variant<std::string, bool, std::vector<int64_t>>;

class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view file) : s_(text), file_(file) {}

  std::map<std::string, PyValue> dict() {
    std::map<std::string, PyValue> out;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      std::string key = string_literal();
      skip_ws();
      expect(':');
      skip_ws();
      PyValue v = value(key);
      QC_INPUT(out.emplace(key, std::move(v)).second, "{}: npy header: expected unique keys, found `{}` twice", file_,
               key);
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_ws();
      expect('}');
      break;
    }
    skip_ws();
    QC_INPUT(i_ == s_.size(), "{}: npy header: expected nothing after the dict, found `{}`", file_,
             printable_text(s_.substr(i_), 20));
    return out;
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  [[noreturn]] void fail(std::string_view expected) const {
    QC_FAIL_INPUT("{}: npy header at byte {}: expected {}, found `{}` (header `{}`)", file_, i_, expected,
                  i_ < s_.size() ? printable_text(s_.substr(i_), 12) : std::string("end of header"),
                  printable_text(s_, 120));
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("`{}`", c));
    ++i_;
  }
  std::string string_literal() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("a quoted string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != quote) {
      if (s_[i_] == '\\') fail("a string without escapes");
      out += s_[i_++];
    }
    expect(quote);
    return out;
  }
  PyValue value(const std::string& key) {
    const char c = peek();
    if (c == '\'' || c == '"') return string_literal();
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    if (c == '(' || c == '[') {
      const char close = c == '(' ? ')' : ']';
      ++i_;
      std::vector<int64_t> items;
      for (;;) {
        skip_ws();
        if (peek() == close) {
          ++i_;
          break;
        }
        items.push_back(integer());
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        skip_ws();
        expect(close);
        break;
      }
      return items;
    }
    fail(fmt::format("a string, True, False or a tuple of integers for `{}`", key));
  }
  int64_t integer() {
    if (peek() == '-') fail("a non-negative integer");
    if (!(peek() >= '0' && peek() <= '9')) fail("an integer");
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, peek() - '0', &v)) {
        fail("an integer below 2^63");
      }
      ++i_;
    }
    if (peek() == 'L') ++i_;  // Python 2 long suffix, written by old numpy
    return v;
  }

  std::string_view s_;
  std::string_view file_;
  size_t i_ = 0;
};

struct Descr {
  DType dtype;
  bool big_endian;
};

// The numpy types with a dtype of their own, one row each: a `descr`'s kind and byte size (written
// little-endian, `|` for one byte). bf16, e4m3 and e5m2 are opaque `V` types.
struct NpyType {
  DType dtype;
  char kind;
  int size;
};
constexpr NpyType kNpyTypes[] = {
    {DType::boolean, 'b', 1}, {DType::u8, 'u', 1},  {DType::i8, 'i', 1},  {DType::i16, 'i', 2},
    {DType::u16, 'u', 2},     {DType::i32, 'i', 4}, {DType::u32, 'u', 4}, {DType::i64, 'i', 8},
    {DType::u64, 'u', 8},     {DType::f16, 'f', 2}, {DType::f32, 'f', 4}, {DType::f64, 'f', 8}};

Descr parse_descr(const std::string& descr_raw, std::string_view file, std::optional<DType> opaque_as) {
  const std::string descr = printable_text(descr_raw, 40);
  QC_INPUT(descr.size() >= 3, "{}: npy `descr`: expected a type string like `<f4`, found `{}`", file, descr);
  const char order = descr[0];
  QC_INPUT(order == '<' || order == '>' || order == '|' || order == '=',
           "{}: npy `descr`: expected a byte order `<`, `>`, `|` or `=`, found `{}`", file, descr);
  const char kind = descr[1];
  const std::string size_text = descr.substr(2);
  QC_INPUT(std::all_of(size_text.begin(), size_text.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               size_text.size() <= 3,
           "{}: npy `descr`: expected a kind and a byte size like `<f4`, found `{}`", file, descr);
  const int size = std::stoi(size_text);
  // `=` is native order, and every machine qconform runs on is little-endian.
  const bool big = order == '>';
  for (const NpyType& t : kNpyTypes) {
    if (t.kind == kind && t.size == size) return Descr{t.dtype, big && size > 1};
  }
  // `<f1` is what np.save writes for ml_dtypes.float8_e5m2 (np.load itself rejects it): an opaque
  // byte like `<V1`.
  if (kind == 'V' || (kind == 'f' && size == 1)) {
    QC_INPUT(opaque_as.has_value(),
             "{}: npy `descr`: found the opaque type `{}` (how np.save writes ml_dtypes bfloat16 and float8 arrays); "
             "expected the caller to say which dtype the bytes hold",
             file, descr);
    QC_INPUT(static_cast<size_t>(size) == dtype_size(*opaque_as) && !big,
             "{}: npy `descr`: expected a little-endian {}-byte opaque type to read as {}, found `{}`", file,
             dtype_size(*opaque_as), dtype_name(*opaque_as), descr);
    return Descr{*opaque_as, false};
  }
  QC_FAIL_INPUT("{}: npy `descr`: expected one of b1, u1-u8, i1-i8, f2, f4, f8 (or V1/V2 with a declared dtype), "
                "found `{}`",
                file, descr);
}

std::string descr_of(DType dtype) {
  for (const NpyType& t : kNpyTypes) {
    if (t.dtype == dtype) return fmt::format("{}{}{}", t.size == 1 ? '|' : '<', t.kind, t.size);
  }
  // What `np.save` writes for ml_dtypes.bfloat16 and float8_e4m3fn arrays (`<V2`, `<V1`). For
  // float8_e5m2 it writes `<f1`, which np.load cannot read back; `<V1` keeps our files loadable by numpy.
  QC_CHECK(dtype == DType::bf16 || dtype == DType::e4m3 || dtype == DType::e5m2, "unknown DType {}",
           static_cast<int>(dtype));
  return fmt::format("<V{}", dtype_size(dtype));
}

}  // namespace

bool is_npy(std::span<const std::byte> bytes) {
  return bytes.size() >= kMagicLen && std::memcmp(bytes.data(), kMagic, kMagicLen) == 0;
}

Tensor parse_npy(std::span<const std::byte> bytes, std::string_view file, std::shared_ptr<const void> keep_alive,
                 std::optional<DType> opaque_as) {
  QC_INPUT(is_npy(bytes), "{}: expected the .npy magic `\\x93NUMPY`, found {} bytes that do not start with it", file,
           bytes.size());
  QC_INPUT(bytes.size() >= kMagicLen + 2, "{}: npy: truncated before the format version", file);
  const auto major = static_cast<unsigned>(bytes[6]);
  const auto minor = static_cast<unsigned>(bytes[7]);
  QC_INPUT((major == 1 || major == 2 || major == 3) && minor == 0,
           "{}: npy format version: expected 1.0, 2.0 or 3.0, found {}.{}", file, major, minor);
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + length_bytes;
  QC_INPUT(bytes.size() >= prefix, "{}: npy: truncated inside the header length field", file);
  size_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_len |= static_cast<size_t>(bytes[8 + i]) << (8 * i);
  QC_INPUT(header_len <= kMaxHeader, "{}: npy header length: expected at most {} bytes, found {}", file, kMaxHeader,
           header_len);
  QC_INPUT(header_len <= bytes.size() - prefix,
           "{}: npy header length: expected at most the {} bytes that follow, found {} (truncated file?)", file,
           bytes.size() - prefix, header_len);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + prefix), header_len);
  QC_INPUT(std::all_of(text.begin(), text.end(), [](char c) { return c != '\0'; }),
           "{}: npy header: expected text, found a NUL byte", file);

  auto dict = HeaderParser(text, file).dict();
  QC_INPUT(dict.size() == 3 && dict.count("descr") && dict.count("fortran_order") && dict.count("shape"),
           "{}: npy header: expected exactly the keys descr, fortran_order, shape, found {} keys (`{}`)", file,
           dict.size(), printable_text(text, 120));
  const auto* descr_text = std::get_if<std::string>(&dict["descr"]);
  QC_INPUT(descr_text != nullptr, "{}: npy `descr`: expected a type string (structured dtypes are not supported)",
           file);
  const auto* fortran = std::get_if<bool>(&dict["fortran_order"]);
  QC_INPUT(fortran != nullptr, "{}: npy `fortran_order`: expected True or False", file);
  const auto* shape = std::get_if<std::vector<int64_t>>(&dict["shape"]);
  QC_INPUT(shape != nullptr, "{}: npy `shape`: expected a tuple of non-negative integers", file);

  const Descr descr = parse_descr(*descr_text, file, opaque_as);
  const size_t es = dtype_size(descr.dtype);
  const auto numel = checked_numel(*shape, es);
  QC_INPUT(numel.has_value(), "{}: npy `shape`: expected a size whose byte count fits in 63 bits, found {}", file,
           shape_string(*shape));
  const size_t data_bytes = static_cast<size_t>(*numel) * es;
  const size_t data_offset = prefix + header_len;
  QC_INPUT(bytes.size() - data_offset == data_bytes,
           "{}: npy data: expected {} bytes for {} {} elements of shape {}, found {} bytes after the header", file,
           data_bytes, *numel, dtype_name(descr.dtype), shape_string(*shape), bytes.size() - data_offset);

  const std::byte* p = bytes.data() + data_offset;
  const bool aligned = reinterpret_cast<uintptr_t>(p) % std::min<size_t>(es, 8) == 0;
  if (!*fortran && !descr.big_endian && aligned) return Tensor::borrow(descr.dtype, *shape, p, std::move(keep_alive));

  // Fortran order is C order of the reversed shape: read it as such and transpose by strides.
  std::vector<int64_t> stored_shape = *shape;
  if (*fortran) std::reverse(stored_shape.begin(), stored_shape.end());
  Tensor stored = Tensor::from_bytes(descr.dtype, stored_shape, std::span<const std::byte>(p, data_bytes));
  if (descr.big_endian) {
    auto b = stored.mutable_bytes();
    for (size_t e = 0; e < b.size(); e += es) std::reverse(b.begin() + e, b.begin() + e + es);
  }
  if (!*fortran) return stored;
  if (stored.ndim() <= 1) return stored;
  // A Fortran-ordered [d0, d1, ..., dn] has element (i0..in) at sum(i_k * prod(d_0..d_{k-1})).
  // Build that strided view over the stored bytes and let `clone()` gather it into C order.
  Tensor view = stored.reshaped(stored_shape);
  std::vector<int64_t> f_strides(shape->size());
  int64_t s = 1;
  for (size_t k = 0; k < shape->size(); ++k) {
    f_strides[k] = s;
    s *= (*shape)[k];
  }
  return view.as_strided(*shape, f_strides).clone();
}

Tensor read_npy(const std::string& path, std::optional<DType> opaque_as) {
  auto mapping = std::make_shared<const MappedFile>(path);
  const std::span<const std::byte> bytes = mapping->bytes();
  return parse_npy(bytes, path, std::move(mapping), opaque_as);
}

namespace {

std::string npy_header(const Tensor& tensor) {
  const auto& shape = tensor.shape();
  // Python's repr of a tuple: `()`, `(3,)`, `(2, 3)`.
  std::string shape_repr = shape.empty()      ? "()"
                           : shape.size() == 1 ? fmt::format("({},)", shape[0])
                                               : fmt::format("({})", fmt::join(shape, ", "));
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr_of(tensor.dtype()), shape_repr);
  // numpy leaves room to grow the first axis in place (GROWTH_AXIS_MAX_DIGITS = 21)...
  if (!shape.empty()) header.append(21 - fmt::format("{}", shape[0]).size(), ' ');
  // ...then pads with spaces and a newline so the data starts at a multiple of 64 bytes; the pad
  // is 1..64 bytes, never 0, exactly as numpy's `_wrap_header` computes it.
  auto wrap = [&](size_t length_bytes) {
    const size_t hlen = header.size() + 1;
    const size_t pad = 64 - ((kMagicLen + 2 + length_bytes + hlen) % 64);
    return std::pair<size_t, size_t>{hlen + pad, pad};
  };
  auto [total, pad] = wrap(2);
  unsigned major = 1;
  if (total > 0xFFFF) {
    major = 2;
    std::tie(total, pad) = wrap(4);
  }
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(major);
  out += '\0';
  const size_t length_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < length_bytes; ++i) out += static_cast<char>((total >> (8 * i)) & 0xFF);
  out += header;
  out.append(pad, ' ');
  out += '\n';
  return out;
}

}  // namespace

std::string serialize_npy(const Tensor& tensor) {
  std::string out = npy_header(tensor);
  const Tensor c = tensor.contiguous();
  const auto b = c.bytes();
  out.append(reinterpret_cast<const char*>(b.data()), b.size());
  return out;
}

void write_npy(const std::string& path, const Tensor& tensor) {
  const std::string header = npy_header(tensor);
  const Tensor c = tensor.contiguous();
  AtomicFileWriter writer(path);
  writer.write(std::string_view(header));
  writer.write(c.bytes());
  writer.commit();
}

}  // namespace qc
