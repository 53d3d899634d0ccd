// The power-of-two checkpoint (`pow2_checkpoint`, model.hpp): a W8A8 checkpoint whose scales are
// rounded to powers of two, every other byte unchanged.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <unistd.h>

#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "core/fileio.hpp"
#include "core/output_lock.hpp"
#include "model/hf_block.hpp"
#include "model/model.hpp"
#include "core/numerics_checked.hpp"
#include "qconform/numerics.hpp"
#include "core/safetensors.hpp"
#include "core/shard_index.hpp"
#include "core/sha256.hpp"
#include "model/checkpoint_dir.hpp"
#include "model/hf_config.hpp"

namespace qc {

namespace fs = std::filesystem;

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Rewrites one safetensors file: `*.weight_scale` tensors rounded to powers of two in their own
// dtype, everything else (tensor bytes, metadata) unchanged.
void pow2_safetensors(const std::string& in, const std::string& out, Pow2Report& report) {
  const SafetensorsFile f = read_safetensors(in);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : f.tensors) {
    if (!ends_with(name, ".weight_scale")) {
      tensors.emplace_back(name, t);
      ++report.tensors_copied;
      continue;
    }
    QC_INPUT(t.dtype() == DType::f32 || t.dtype() == DType::bf16,
             "{}: tensor `{}`: expected a weight scale of dtype F32 or BF16, found {}", in, name,
             dtype_safetensors_name(t.dtype()));
    Tensor r = t.clone();
    const int64_t n = r.numel();
    for (int64_t i = 0; i < n; ++i) {
      float v, p;
      if (r.dtype() == DType::f32) {
        v = r.mutable_span<float>()[static_cast<size_t>(i)];
      } else {
        v = bf16_to_f32(r.mutable_span<uint16_t>()[static_cast<size_t>(i)]);
      }
      QC_INPUT(std::isfinite(v) && v > 0, "{}: tensor `{}`: expected finite positive scales, found {} at index {}", in,
               name, v, i);
      p = pow2_nearest_log2(v);
      report.scales_changed += p != v;
      ++report.scales;
      if (r.dtype() == DType::f32) {
        r.mutable_span<float>()[static_cast<size_t>(i)] = p;
      } else {
        const uint16_t b = f32_to_bf16(p);
        // A power of two of a bf16 scale is a bf16 value: same exponent range, one significand bit.
        QC_CHECK(bf16_to_f32(b) == p, "{}: `{}`[{}]: 2^k = {} is not exact in bf16", in, name, i, p);
        r.mutable_span<uint16_t>()[static_cast<size_t>(i)] = b;
      }
    }
    tensors.emplace_back(name, std::move(r));
    ++report.scale_tensors;
  }
  write_safetensors(out, tensors, f.metadata);
}

std::string no_scales_message(const std::string& in, const std::string& what) {
  return fmt::format(
      "{}: {} stores no weight scales (its weights are floating point; qconform quantizes them at run time), so "
      "there is nothing to round to a power of two: the probe for it is `--mode w8a8 --pow2` on generate, replay "
      "and capture (the same rounding of the same scales, in memory). To get a probe checkpoint on disk, start "
      "from a compressed-tensors W8A8 checkpoint",
      in, what);
}

}  // namespace

Pow2Report pow2_checkpoint(const std::string& in, const std::string& out) {
  QC_INPUT(fs::exists(in), "{}: expected a checkpoint, found nothing", in);
  std::error_code ec;
  QC_INPUT(!(fs::exists(out) && fs::equivalent(in, out, ec)), "pow2: OUT {} is IN {}: the input is never touched; "
           "choose another output path", out, in);
  QC_INPUT(!fs::exists(out), "{}: expected an output path that does not exist yet, found an existing {}", out,
           fs::is_directory(out) ? "directory" : "file");
  Pow2Report report;
  if (fs::is_regular_file(in)) {
    QC_INPUT(ends_with(in, ".safetensors"),
             "{}", no_scales_message(in, "this file (not .safetensors: a llama2.c fp32 checkpoint?)"));
    report.inputs.emplace_back(in, sha256_file(in));
    pow2_safetensors(in, out, report);
    QC_INPUT(report.scale_tensors > 0, "{}: expected `*.weight_scale` tensors (a compressed-tensors checkpoint), found "
             "none", in);
    report.outputs.emplace_back(out, sha256_file(out));
    return report;
  }
  const fs::path dir(in);
  if (!fs::exists(dir / "config.json")) {
    QC_INPUT(!fs::exists(dir / "model.bin"), "{}", no_scales_message(in, "this llama2.c fp32 checkpoint"));
    QC_FAIL_INPUT("{}: expected a compressed-tensors checkpoint directory (config.json + *.safetensors), found no "
                  "config.json", in);
  }
  const HfHeader h = parse_config((dir / "config.json").string());
  QC_INPUT(h.weights.quantized, "{}", no_scales_message(in, "this Hugging Face checkpoint (config.json has no "
                                                    "quantization_config)"));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    QC_INPUT(e.is_regular_file(), "{}: expected only regular files in the checkpoint directory, found {}", in,
             e.path().string());
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  StagingDir tmp(out);
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    const std::string dst = (fs::path(tmp.path) / name).string();
    report.inputs.emplace_back(f.string(), sha256_file(f.string()));
    if (ends_with(name, ".safetensors")) {
      pow2_safetensors(f.string(), dst, report);
    } else {
      write_file_atomic(dst, read_file(f.string()));  // config.json and anything else, byte for byte
    }
  }
  QC_INPUT(report.scale_tensors > 0, "{}: expected `*.weight_scale` tensors (a compressed-tensors checkpoint), found "
           "none", in);
  tmp.commit(out);
  for (const fs::path& f : files) {
    const std::string o = (fs::path(out) / f.filename()).string();
    report.outputs.emplace_back(o, sha256_file(o));
  }
  return report;
}

}  // namespace qc
