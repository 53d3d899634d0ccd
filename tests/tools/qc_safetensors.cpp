// Drives qconform's safetensors and .npy code from the Python peer tests
// (tests/peer/test_safetensors_peer.py).
//
//   qc_safetensors dump FILE [--opaque DTYPE]   JSON on stdout: format, metadata, and per tensor
//                                                name, dtype (safetensors name), shape, nbytes,
//                                                sha256 of its bytes (in file order)
//   qc_safetensors copy IN OUT [--opaque DTYPE]  read IN and write it again as OUT (same format)
//   qc_safetensors pattern OUT                   write a safetensors file with one tensor per
//                                                dtype whose bytes follow a documented formula
//   qc_safetensors pattern-npy DIR               the same tensors, one .npy file per dtype
//
// Exit codes: 0 ok, 2 input error (message on stderr), 3 internal error.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/npy.hpp"
#include "core/safetensors.hpp"
#include "core/sha256.hpp"

namespace {

using qc::DType;
using qc::Tensor;

nlohmann::ordered_json describe(const std::string& name, const Tensor& t) {
  nlohmann::ordered_json j;
  j["name"] = name;
  j["dtype"] = std::string(qc::dtype_safetensors_name(t.dtype()));
  j["shape"] = t.shape();
  j["nbytes"] = t.nbytes();
  j["sha256"] = qc::sha256_hex(t.contiguous().bytes());
  return j;
}

bool is_npy_file(const std::string& path) {
  const qc::MappedFile f(path);
  return qc::is_npy(f.bytes());
}

// The pattern tensors: for the dtype at position `k` of `kAllDTypes`, shape [17, 3] and byte i
// equal to (7 i + 13 k) mod 256 (booleans: that value mod 2). Two more tensors hold every bf16 and
// every e4m3 bit pattern in order. The peer test rebuilds these with numpy, independently.
std::vector<std::pair<std::string, Tensor>> pattern_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  int k = 0;
  for (DType d : qc::kAllDTypes) {
    Tensor t = Tensor::empty(d, {17, 3});
    auto b = t.mutable_bytes();
    for (size_t i = 0; i < b.size(); ++i) {
      unsigned v = (7 * i + 13 * k) % 256;
      if (d == DType::boolean) v %= 2;
      b[i] = static_cast<std::byte>(v);
    }
    out.emplace_back(fmt::format("pattern.{}", qc::dtype_name(d)), std::move(t));
    ++k;
  }
  Tensor all_bf16 = Tensor::empty(DType::bf16, {256, 256});
  for (uint32_t i = 0; i < 65536; ++i) all_bf16.mutable_span<uint16_t>()[i] = static_cast<uint16_t>(i);
  out.emplace_back("all.bf16", std::move(all_bf16));
  Tensor all_e4m3 = Tensor::empty(DType::e4m3, {256});
  for (uint32_t i = 0; i < 256; ++i) all_e4m3.mutable_span<uint8_t>()[i] = static_cast<uint8_t>(i);
  out.emplace_back("all.e4m3", std::move(all_e4m3));
  return out;
}

int run(const std::vector<std::string>& args) {
  QC_INPUT(!args.empty(), "usage: qc_safetensors dump|copy|pattern|pattern-npy ...");
  std::optional<DType> opaque;
  std::vector<std::string> pos;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--opaque") {
      QC_INPUT(i + 1 < args.size(), "--opaque needs a dtype name");
      opaque = qc::dtype_from_name(args[++i]);
      QC_INPUT(opaque.has_value(), "--opaque: unknown dtype `{}`", args[i]);
    } else {
      pos.push_back(args[i]);
    }
  }
  const std::string& verb = args[0];
  if (verb == "dump" && pos.size() == 1) {
    nlohmann::ordered_json j;
    if (is_npy_file(pos[0])) {
      const Tensor t = qc::read_npy(pos[0], opaque);
      j["format"] = "npy";
      j["metadata"] = nlohmann::json::object();
      j["tensors"] = nlohmann::ordered_json::array({describe("", t)});
    } else {
      const auto f = qc::read_safetensors(pos[0]);
      j["format"] = "safetensors";
      j["metadata"] = f.metadata;
      j["tensors"] = nlohmann::ordered_json::array();
      for (const auto& [name, t] : f.tensors) j["tensors"].push_back(describe(name, t));
    }
    std::puts(j.dump().c_str());
    return 0;
  }
  if (verb == "copy" && pos.size() == 2) {
    if (is_npy_file(pos[0])) {
      qc::write_npy(pos[1], qc::read_npy(pos[0], opaque));
    } else {
      const auto f = qc::read_safetensors(pos[0]);
      qc::write_safetensors(pos[1], f.tensors, f.metadata);
    }
    return 0;
  }
  if (verb == "pattern" && pos.size() == 1) {
    qc::write_safetensors(pos[0], pattern_tensors(), {{"writer", "qconform"}, {"note", "every dtype, \"quoted\"\n"}});
    return 0;
  }
  if (verb == "pattern-npy" && pos.size() == 1) {
    for (const auto& [name, t] : pattern_tensors()) qc::write_npy(fmt::format("{}/{}.npy", pos[0], name), t);
    return 0;
  }
  QC_FAIL_INPUT("usage: qc_safetensors dump FILE | copy IN OUT | pattern OUT | pattern-npy DIR [--opaque DTYPE]");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const qc::Error& e) {
    std::fprintf(stderr, "qc_safetensors: error: %s\n", e.what());
    return e.kind() == qc::ErrorKind::input ? 2 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qc_safetensors: internal error: %s\n", e.what());
    return 3;
  }
}
