// libFuzzer target for the safetensors (and .npy) parsers: arbitrary bytes in memory, no file I/O.
//
// Build and run: `make test-fuzz FUZZ_SECONDS=60` (clang, build-fuzz/, ASan + UBSan). Seeds live
// in tests/fuzz/corpus/.
//
// A `qc::Error` of kind `input` is the expected outcome for a malformed file; any other exception
// (an internal check) or a sanitizer report is a bug. Files that parse must also survive a round
// trip: serializing the parsed tensors and parsing the result gives the same tensors.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "qconform/error.hpp"
#include "core/npy.hpp"
#include "core/safetensors.hpp"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_safetensors: invariant violated: %s\n", what);
    std::abort();
  }
}

void check_round_trip(const qc::SafetensorsFile& file, std::span<const std::byte> input) {
  for (const auto& [name, t] : file.tensors) {
    const auto b = t.bytes();
    // Zero-copy views must lie inside the input (copies, for misaligned data, live elsewhere).
    if (!t.is_writable() && !b.empty()) {
      require(b.data() >= input.data() && b.data() + b.size() <= input.data() + input.size(), "view outside input");
    }
    require(b.size() == t.nbytes(), "bytes() size differs from nbytes()");
  }
  const std::string again = qc::serialize_safetensors(file.tensors, file.metadata);
  const auto reparsed = qc::parse_safetensors(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(again.data()), again.size()), "round-trip");
  require(reparsed.metadata == file.metadata, "metadata changed in a round trip");
  require(reparsed.tensors.size() == file.tensors.size(), "tensor count changed in a round trip");
  for (const auto& [name, t] : file.tensors) {
    const qc::Tensor& u = reparsed.at(name);
    require(u.dtype() == t.dtype() && u.shape() == t.shape(), "dtype or shape changed in a round trip");
    require(u.nbytes() == t.nbytes() &&
                (t.nbytes() == 0 || std::memcmp(u.bytes().data(), t.bytes().data(), t.nbytes()) == 0),
            "bytes changed in a round trip");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  try {
    if (qc::is_npy(input)) {
      const qc::Tensor t = qc::parse_npy(input, "fuzz.npy", nullptr, qc::DType::bf16);
      require(t.is_contiguous() && t.bytes().size() == t.nbytes(), "npy tensor not contiguous");
    } else {
      check_round_trip(qc::parse_safetensors(input, "fuzz.safetensors"), input);
    }
  } catch (const qc::Error& e) {
    if (e.kind() != qc::ErrorKind::input) {
      std::fprintf(stderr, "fuzz_safetensors: internal error: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
