// Hugging Face-layout models (`config.json` + `model.safetensors`, LLaMA / Qwen2 / Qwen3 keys,
// fp32 or bf16) and compressed-tensors W8A8 checkpoints ("int-quantized": int8 `weight` [N,K] +
// `weight_scale` [N,1] in the model dtype; "float-quantized", as vLLM's FP8-dynamic models ship:
// F8_E4M3 `weight` [N,K] + `weight_scale` [N,1] per channel or [1] / [] per tensor), read and
// written; `load_model` dispatches on the path.
//
// Rotary layout: Hugging Face checkpoints use rotate_half; llama2.c files use interleaved pairs.
// `convert_llama_weights_to_hf.py` permutes the q/k rows of each head so that the two are the same
// model: HF row (h, p·hd/2 + i) = llama2.c row (h, 2i + p). `with_rope_style` applies that
// permutation in either direction (and to q/k biases and QK-norm weights).
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
#include "model/checkpoint_dir.hpp"
#include "model/hf_config.hpp"
#include "core/name_table.hpp"
#include "model/model.hpp"
#include "core/numerics_checked.hpp"
#include "qconform/numerics.hpp"
#include "core/safetensors.hpp"
#include "core/shard_index.hpp"
#include "core/sha256.hpp"

namespace qc {

namespace fs = std::filesystem;

namespace {

// ---- tensors ----

// The tensors of one checkpoint: a single safetensors file or the shards an index names. Every
// lookup checks name, shape and dtype; errors name the file that holds (or should hold) the tensor.
class TensorReader {
 public:
  explicit TensorReader(std::vector<SafetensorsFile> files) : files_(std::move(files)) {
    for (const SafetensorsFile& f : files_) {
      for (const auto& [name, t] : f.tensors) {
        const auto [it, fresh] = index_.emplace(name, Entry{&t, &f.path});
        QC_INPUT(fresh, "{}: tensor `{}`: expected it in one shard only, found it in {} too", f.path, name,
                 *it->second.path);
      }
    }
  }

  const Tensor& get(const std::string& name, const std::vector<int64_t>& shape) {
    auto it = index_.find(name);
    QC_INPUT(it != index_.end(), "{}: tensor `{}`: expected {} , found no such tensor", where(), name,
             shape_string(shape));
    QC_INPUT(it->second.tensor->shape() == shape, "{}: tensor `{}`: expected shape {}, found {}", *it->second.path, name,
             shape_string(shape), shape_string(it->second.tensor->shape()));
    used_.insert(name);
    return *it->second.tensor;
  }
  bool has(const std::string& name) const { return index_.count(name) != 0; }

  std::vector<float> floats(const std::string& name, const std::vector<int64_t>& shape) {
    const Tensor& t = get(name, shape);
    std::vector<float> out(static_cast<size_t>(t.numel()));
    if (t.dtype() == DType::f32) {
      const auto s = t.contiguous().span<float>();
      std::copy(s.begin(), s.end(), out.begin());
    } else if (t.dtype() == DType::bf16) {
      const auto s = t.contiguous().span<uint16_t>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(s[i]);
    } else {
      QC_FAIL_INPUT("{}: tensor `{}`: expected dtype F32 or BF16, found {}", path_of(name), name,
                    dtype_safetensors_name(t.dtype()));
    }
    // Every weight must be finite: a NaN or infinity would surface much later as an internal check
    // (no finite logits) instead of naming the tensor and the element here.
    for (size_t i = 0; i < out.size(); ++i) {
      if (std::isfinite(out[i])) continue;
      std::vector<int64_t> at(shape.size());
      size_t rest = i;
      for (size_t d = shape.size(); d-- > 0;) {
        at[d] = static_cast<int64_t>(rest % static_cast<size_t>(shape[d]));
        rest /= static_cast<size_t>(shape[d]);
      }
      uint32_t bits;
      std::memcpy(&bits, &out[i], 4);
      QC_FAIL_INPUT("{}: tensor `{}` element [{}] (flat index {}): expected a finite weight, found {} (as fp32: bits "
                    "0x{:08x})",
                    path_of(name), printable_text(name), fmt::join(at, ", "), i, out[i], bits);
    }
    return out;
  }

  // The codes of a quantized weight: I8 (int-quantized), or F8_E4M3 (float-quantized) bit patterns,
  // every one finite (e4m3fn's NaN codes S.1111.111 are refused with their coordinates, as operand
  // files refuse them).
  std::vector<int8_t> codes(const std::string& name, const std::vector<int64_t>& shape, ElementType type) {
    const Tensor& t = get(name, shape);
    const bool fp8 = type != ElementType::int8;
    QC_INPUT(t.dtype() == (fp8 ? DType::e4m3 : DType::i8), "{}: tensor `{}`: expected dtype {}, found {}",
             path_of(name), name, fp8 ? "F8_E4M3 (compressed-tensors float-quantized)" : "I8 (compressed-tensors int-quantized)",
             dtype_safetensors_name(t.dtype()));
    const auto s = t.contiguous().span<int8_t>();
    std::vector<int8_t> out(s.begin(), s.end());
    for (size_t i = 0; fp8 && i < out.size(); ++i) {
      const uint8_t code = static_cast<uint8_t>(out[i]);
      QC_INPUT(e4m3fn_is_finite(code), "{}: tensor `{}` element [{}, {}]: expected a finite e4m3 code, found 0x{:02x} (a "
               "NaN encoding)", path_of(name), name, i / static_cast<size_t>(shape[1]), i % static_cast<size_t>(shape[1]),
               code);
    }
    return out;
  }

  DType dtype_of(const std::string& name) const { return index_.at(name).tensor->dtype(); }
  // The shape of a tensor that exists, else nullopt (for tensors that may take one of several shapes).
  std::optional<std::vector<int64_t>> shape_of(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) return std::nullopt;
    return it->second.tensor->shape();
  }

  void check_all_used() const {
    for (const SafetensorsFile& f : files_) {
      for (const auto& [name, t] : f.tensors) {
        QC_INPUT(used_.count(name), "{}: tensor `{}`: expected only the tensors of the configured model, found this "
                 "one too (a config mismatch?)", f.path, name);
      }
    }
  }
  // The file holding `name` (for messages about a tensor that exists).
  const std::string& path_of(const std::string& name) const { return *index_.at(name).path; }

 private:
  struct Entry {
    const Tensor* tensor;
    const std::string* path;
  };
  // Where a missing tensor was looked for: the file, or the first shard and how many others.
  std::string where() const {
    if (files_.size() == 1) return files_[0].path;
    return fmt::format("{} (and {} other shards)", files_.empty() ? "" : files_[0].path, files_.size() - 1);
  }
  std::vector<SafetensorsFile> files_;  // never resized after construction: Entry points into it
  std::map<std::string, Entry> index_;
  std::set<std::string> used_;
};

// `weight` = fp32(value(q) · scale) for every code: one rounding (exact for bf16 scales, whose 8
// significant bits times an int8 or e4m3 code fit in fp32), what mode `fp32` runs for a quantized
// checkpoint.
void dequantize(LinearLayer& l) {
  const bool fp8 = l.weight_type != ElementType::int8;
  // The scale of element (i, j): its row's, or its block's (block-scaled FP8).
  const ScaleLayout layout = l.weight_blocks ? *l.weight_blocks : ScaleLayout::per_channel();
  l.weight.resize(static_cast<size_t>(l.n_out * l.k_in));
  for (int64_t i = 0; i < l.n_out; ++i) {
    for (int64_t j = 0; j < l.k_in; ++j) {
      const size_t at = static_cast<size_t>(i * l.k_in + j);
      const float v = fp8 ? e4m3fn_to_f32(static_cast<uint8_t>(l.weight_q[at])) : static_cast<float>(l.weight_q[at]);
      const int64_t kb = layout.k_blocked() ? j / layout.block_k : 0;
      l.weight[at] = v * l.weight_scale[static_cast<size_t>(layout.index(i, kb, l.k_in))];
    }
  }
}

LinearLayer read_linear(TensorReader& r, const std::string& name, int64_t n, int64_t k, bool bias,
                        const WeightStorage& storage) {
  LinearLayer l;
  l.name = name;
  l.n_out = n;
  l.k_in = k;
  const std::string key = "model." + name;
  if (storage.quantized) {
    QC_CHECK(storage.type == ElementType::int8 || storage.type == ElementType::e4m3,
             "checkpoint weights of type {}", element_type_name(storage.type));
    l.weight_type = storage.type;
    l.weight_scaling = storage.scaling;
    l.weight_q = r.codes(key + ".weight", {n, k}, storage.type);
    const std::string skey = key + (storage.hf_fp8 ? ".weight_scale_inv" : ".weight_scale");
    if (storage.blocks) {
      // Block-scaled: one scale per block, [ceil(n/b_n), ceil(k/b_k)] (F32 or BF16).
      const ScaleLayout& b = *storage.blocks;
      l.weight_blocks = b;
      l.weight_scale = r.floats(skey, {b.scale_rows(n), b.scale_cols(k)});
      for (size_t i = 0; i < l.weight_scale.size(); ++i) {
        const float s = l.weight_scale[i];
        const int64_t row = static_cast<int64_t>(i) / b.scale_cols(k), col = static_cast<int64_t>(i) % b.scale_cols(k);
        QC_INPUT(std::isfinite(s) && s > 0, "{}: tensor `{}` element [{}, {}]: expected a finite scale > 0, found {}",
                 r.path_of(skey), skey, row, col, s);
        QC_INPUT(!b.ue8m0 || (f32_bits(s) & 0x7FFFFFu) == 0,
                 "{}: tensor `{}` element [{}, {}]: expected a power of two (scale_fmt ue8m0), found {}", r.path_of(skey),
                 skey, row, col, s);
      }
      dequantize(l);
      if (bias) l.bias = r.floats(key + ".bias", {n});
      return l;
    }
    if (storage.scaling == WeightScaling::per_channel) {
      l.weight_scale = r.floats(skey, {n, 1});
    } else {
      // compressed-tensors writes a per-tensor scale as [1]; some exports hold it as a scalar [].
      const std::optional<std::vector<int64_t>> shape = r.shape_of(skey);
      const std::vector<float> one = r.floats(skey, shape && shape->empty() ? std::vector<int64_t>{} : std::vector<int64_t>{1});
      l.weight_scale.assign(static_cast<size_t>(n), one[0]);  // repeated per channel, as operand files keep it
    }
    for (int64_t i = 0; i < n; ++i) {
      const float s = l.weight_scale[static_cast<size_t>(i)];
      QC_INPUT(std::isfinite(s) && s > 0, "{}: tensor `{}`: expected finite positive scales, found {} at row {}",
               r.path_of(skey), skey, s, i);
    }
    dequantize(l);
  } else {
    l.weight = r.floats(key + ".weight", {n, k});
  }
  if (bias) l.bias = r.floats(key + ".bias", {n});
  return l;
}

// ---- writing ----

Tensor float_tensor(const std::vector<float>& v, std::vector<int64_t> shape, DType dtype, const std::string& name) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  QC_CHECK(static_cast<size_t>(t.numel()) == v.size(), "tensor `{}`: {} values for shape {}", name, v.size(),
           shape_string(t.shape()));
  if (dtype == DType::f32) {
    std::memcpy(t.mutable_bytes().data(), v.data(), sizeof(float) * v.size());
  } else {
    auto out = t.mutable_span<uint16_t>();
    for (size_t i = 0; i < v.size(); ++i) {
      out[i] = f32_to_bf16(v[i]);
      QC_CHECK(bf16_to_f32(out[i]) == v[i] || std::isnan(v[i]),
               "tensor `{}`: value {} at {} is not bf16-representable (a bf16 model must hold bf16 values)", name,
               v[i], i);
    }
  }
  return t;
}


template <class T>
void permute_rows_t(std::vector<T>& v, int64_t heads, int64_t hd, int64_t row_len, RopeStyle to) {
  if (v.empty()) return;
  std::vector<T> src = v;
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t p = 0; p < 2; ++p) {
        const int64_t hf_row = h * hd + p * half + i, ll_row = h * hd + 2 * i + p;
        const int64_t dst = to == RopeStyle::rotate_half ? hf_row : ll_row;
        const int64_t from = to == RopeStyle::rotate_half ? ll_row : hf_row;
        std::copy_n(src.begin() + from * row_len, row_len, v.begin() + dst * row_len);
      }
    }
  }
}

void permute_linear(LinearLayer& l, int64_t heads, int64_t hd, RopeStyle to) {
  permute_rows_t(l.weight, heads, hd, l.k_in, to);
  permute_rows_t(l.weight_q, heads, hd, l.k_in, to);
  permute_rows_t(l.weight_scale, heads, hd, 1, to);
  permute_rows_t(l.bias, heads, hd, 1, to);
}

// A copy of `model` whose unquantized linear layers `quantize(layer, dtype)` turns into e4m3 codes and
// their scales (in the model's scale dtype), each then dequantized as load_hf reads the written
// checkpoint back; a layer already quantized stays as it is once `check_quantized(layer)` accepts it.
template <class CheckQuantized, class Quantize>
Model quantize_linear_layers(const Model& model, CheckQuantized check_quantized, Quantize quantize) {
  Model m = model;
  const WeightScaleDtype dtype = weight_scale_dtype_for(m.config);
  for (DecoderLayer& L : m.layers) {
    for (LinearLayer* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
      if (l->quantized()) {
        check_quantized(*l);
        continue;
      }
      l->weight_type = ElementType::e4m3;
      l->weight_q.resize(static_cast<size_t>(l->n_out * l->k_in));
      quantize(*l, dtype);
      dequantize(*l);  // what load_hf gives for the written checkpoint
    }
  }
  return m;
}

}  // namespace

Model fp8_quantized(const Model& model, WeightScaling scaling) {
  return quantize_linear_layers(
      model,
      [&](const LinearLayer& l) {
        QC_INPUT(l.weight_type == ElementType::e4m3 && l.weight_scaling == scaling,
                 "{}: layer `{}`: expected an unquantized or e4m3 {} layer to quantize to FP8, found {}", model.source,
                 l.name, to_string(scaling), weight_storage(l).describe());
      },
      [&](LinearLayer& l, WeightScaleDtype dtype) {
        l.weight_scaling = scaling;
        l.weight_scale.resize(static_cast<size_t>(l.n_out));
        quantize_weights_fp8(ElementType::e4m3, scaling, l.weight.data(), l.n_out, l.k_in,
                             reinterpret_cast<uint8_t*>(l.weight_q.data()), l.weight_scale.data(), dtype);
      });
}

Model fp8_block_quantized(const Model& model, const ScaleLayout& blocks, BlockQuantizer quantizer) {
  return quantize_linear_layers(
      model,
      [&](const LinearLayer& l) {
        QC_INPUT(l.weight_type == ElementType::e4m3 && l.weight_blocks == blocks,
                 "{}: layer `{}`: expected an unquantized layer or e4m3 weights in {} blocks to quantize to block-scaled "
                 "FP8, found {}",
                 model.source, l.name, blocks.spec(), weight_storage(l).describe());
      },
      [&](LinearLayer& l, WeightScaleDtype dtype) {
        l.weight_blocks = blocks;
        l.weight_scale.resize(static_cast<size_t>(blocks.scale_count(l.n_out, l.k_in)));
        quantize_weights_fp8_blocks(ElementType::e4m3, quantizer, blocks.block_rows, blocks.block_k, blocks.ue8m0,
                                    l.weight.data(), l.n_out, l.k_in, reinterpret_cast<uint8_t*>(l.weight_q.data()),
                                    l.weight_scale.data(), dtype);
      });
}

CheckpointTraits peek_checkpoint(const std::string& path) {
  const fs::path config = fs::path(path) / "config.json";
  if (!fs::is_directory(path) || !fs::exists(config)) return {};  // llama2.c: fp32 weights, no bias
  const HfHeader h = parse_config(config.string());
  return {h.weights, h.config.qkv_bias};
}

Model with_rope_style(const Model& model, RopeStyle style) {
  Model m = model;
  if (m.config.rope_style == style) return m;
  const ModelConfig& c = m.config;
  for (DecoderLayer& L : m.layers) {
    permute_linear(L.q, c.n_heads, c.head_dim, style);
    permute_linear(L.k, c.n_kv_heads, c.head_dim, style);
    permute_rows_t(L.q_norm, 1, c.head_dim, 1, style);
    permute_rows_t(L.k_norm, 1, c.head_dim, 1, style);
  }
  m.config.rope_style = style;
  return m;
}

ShardIndex read_shard_index(const std::string& dir) {
  return read_shard_index_file((fs::path(dir) / "model.safetensors.index.json").string());
}

// The files holding a Hugging Face directory's weights, as (role, path): `model.safetensors`, or
// else the index and its shards in name order.
std::vector<std::pair<std::string, std::string>> weight_files(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(single)) return {{"model.weights", single.string()}};
  QC_INPUT(fs::exists(fs::path(dir) / "model.safetensors.index.json"),
           "{}: expected model.safetensors or model.safetensors.index.json beside config.json, found neither", dir);
  const ShardIndex ix = read_shard_index(dir);
  std::vector<std::pair<std::string, std::string>> files = {{"model.weights.index", ix.path}};
  for (const std::string& shard : ix.shards) files.emplace_back("model.weights." + shard, (fs::path(dir) / shard).string());
  return files;
}

// The tensors of a Hugging Face directory's weights; with shards, the index must name every
// tensor of every shard, each in the shard that holds it.
std::vector<SafetensorsFile> read_weights(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(single)) return {read_safetensors(single.string())};
  const ShardIndex ix = read_shard_index(dir);
  std::vector<SafetensorsFile> files;
  for (const std::string& shard : ix.shards) {
    SafetensorsFile f = read_safetensors((fs::path(dir) / shard).string());
    for (const auto& [tensor, t] : f.tensors) {
      const auto it = ix.weight_map.find(tensor);
      QC_INPUT(it != ix.weight_map.end() && it->second == shard,
               "{}: tensor `{}`: the index maps it to {}, found it in {}", ix.path, tensor,
               it == ix.weight_map.end() ? std::string("nothing") : it->second, shard);
    }
    files.push_back(std::move(f));
  }
  for (const auto& entry : ix.weight_map) {  // (no structured binding: clang cannot capture one)
    const std::string& tensor = entry.first;
    const std::string& shard = entry.second;
    const auto f = std::find_if(files.begin(), files.end(),
                                [&](const SafetensorsFile& x) { return fs::path(x.path).filename() == shard; });
    QC_INPUT(f != files.end() && f->contains(tensor), "{}: tensor `{}`: expected in shard {}, found no such tensor there",
             ix.path, tensor, shard);
  }
  return files;
}

Model load_hf(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  QC_INPUT(fs::exists(config_path), "{}: expected a Hugging Face model directory with config.json, found none", dir);
  const HfHeader h = parse_config(config_path);
  const std::vector<std::pair<std::string, std::string>> files = weight_files(dir);
  const std::string& st_path = files.front().second;  // for messages: the file, or the index
  TensorReader r(read_weights(dir));
  Model m;
  m.config = h.config;
  const ModelConfig& c = m.config;
  const int64_t D = c.hidden, I = c.intermediate, hd = c.head_dim;
  const int64_t q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  QC_INPUT(r.has("model.embed_tokens.weight"), "{}: tensor `model.embed_tokens.weight`: expected [{}, {}], found no "
           "such tensor", st_path, c.vocab, D);
  const DType float_dtype = r.dtype_of("model.embed_tokens.weight");
  m.config.dtype = float_dtype == DType::bf16 ? "bf16" : "f32";
  if (!h.torch_dtype.empty()) {
    QC_INPUT((h.torch_dtype == "bfloat16") == (float_dtype == DType::bf16),
             "{}: field `torch_dtype`: config says {}, but {} stores model.embed_tokens.weight as {}", config_path,
             h.torch_dtype, st_path, dtype_safetensors_name(float_dtype));
  }
  m.embed = r.floats("model.embed_tokens.weight", {c.vocab, D});
  m.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    DecoderLayer& L = m.layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("layers.{}.", i);
    L.attn_norm = r.floats("model." + p + "input_layernorm.weight", {D});
    L.ffn_norm = r.floats("model." + p + "post_attention_layernorm.weight", {D});
    if (c.qk_norm) {
      L.q_norm = r.floats("model." + p + "self_attn.q_norm.weight", {hd});
      L.k_norm = r.floats("model." + p + "self_attn.k_norm.weight", {hd});
    }
    L.q = read_linear(r, p + "self_attn.q_proj", q_dim, D, c.qkv_bias, h.weights);
    L.k = read_linear(r, p + "self_attn.k_proj", kv_dim, D, c.qkv_bias, h.weights);
    L.v = read_linear(r, p + "self_attn.v_proj", kv_dim, D, c.qkv_bias, h.weights);
    L.o = read_linear(r, p + "self_attn.o_proj", D, q_dim, false, h.weights);
    L.gate = read_linear(r, p + "mlp.gate_proj", I, D, false, h.weights);
    L.up = read_linear(r, p + "mlp.up_proj", I, D, false, h.weights);
    L.down = read_linear(r, p + "mlp.down_proj", D, I, false, h.weights);
  }
  m.final_norm = r.floats("model.norm.weight", {D});
  if (c.tie_embeddings) {
    QC_INPUT(!r.has("lm_head.weight"),
             "{}: tensor `lm_head.weight`: expected none (config.json says tie_word_embeddings: true), found one",
             st_path);
  } else {
    m.lm_head = r.floats("lm_head.weight", {c.vocab, D});
  }
  r.check_all_used();
  m.source = dir;
  // The model's identity: the digest of config.json and of the weights (a single file, or the index
  // and then every shard in name order), in that order.
  std::string digests = sha256_file(config_path) + "\n";
  for (const auto& [role, file] : files) digests += sha256_file(file) + "\n";
  m.sha256 = "sha256:" + sha256_hex(digests);
  m.check_shapes();
  return m;
}

std::vector<std::pair<std::string, std::string>> model_files(const std::string& path) {
  if (!fs::is_directory(path)) return {{"model", path}};
  if (!fs::exists(fs::path(path) / "config.json")) return {{"model", (fs::path(path) / "model.bin").string()}};
  std::vector<std::pair<std::string, std::string>> files = {{"model.config", (fs::path(path) / "config.json").string()}};
  for (auto& f : weight_files(path)) files.push_back(std::move(f));
  return files;
}

Model load_model(const std::string& path) {
  QC_INPUT(fs::exists(path), "{}: expected a model (a llama2.c .bin file or a directory with config.json), found "
           "nothing", path);
  if (fs::is_directory(path)) {
    if (fs::exists(fs::path(path) / "config.json")) return load_hf(path);
    const fs::path bin = fs::path(path) / "model.bin";
    QC_INPUT(fs::exists(bin), "{}: expected config.json (Hugging Face layout) or model.bin (llama2.c), found neither",
             path);
    return load_llama2c(bin.string());
  }
  return load_llama2c(path);
}

constexpr NameRow<ModelFormat> kModelFormatNames[] = {
    {ModelFormat::hf, "hf"},
    {ModelFormat::compressed_tensors, "compressed-tensors"},
    {ModelFormat::compressed_tensors_fp8, "compressed-tensors-fp8"},
    {ModelFormat::hf_fp8, "hf-fp8"},
    {ModelFormat::compressed_tensors_fp8_block, "compressed-tensors-fp8-block"},
    {ModelFormat::llama2c, "llama2c"}};

ModelFormat parse_model_format(std::string_view text) {
  if (const auto f = value_of(kModelFormatNames, text)) return *f;
  QC_FAIL_INPUT("--format: expected {}, found `{}`", names_or(kModelFormatNames, "`"), text);
}

std::string_view to_string(ModelFormat format) { return name_of(kModelFormatNames, format); }

void save_model(const Model& model, const std::string& out, ModelFormat format,
                const std::map<std::string, std::string>& extra_files, const std::optional<ScaleLayout>& blocks) {
  model.check_shapes();
  StagingDir tmp(out);
  for (const auto& [name, content] : extra_files) write_file_atomic((fs::path(tmp.path) / name).string(), content);
  if (format == ModelFormat::llama2c) {
    const ModelConfig& c = model.config;
    QC_INPUT(!c.qk_norm && !c.qkv_bias && c.head_dim * c.n_heads == c.hidden && c.rope_theta == 10000.0 &&
                 c.rms_eps == 1e-5f,
             "{}: the llama2.c format holds LLaMA-shaped models only (no QK-norm, no bias, head_dim = hidden / "
             "heads, rope_theta 10000, rms_eps 1e-5); this model has qk_norm={} qkv_bias={} head_dim={} hidden={} "
             "heads={} rope_theta={} rms_eps={}",
             out, c.qk_norm, c.qkv_bias, c.head_dim, c.hidden, c.n_heads, c.rope_theta, c.rms_eps);
    const std::vector<uint8_t> bytes = encode_llama2c_v1(with_rope_style(model, RopeStyle::interleaved));
    write_file_atomic((fs::path(tmp.path) / "model.bin").string(),
                      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    tmp.commit(out);
    return;
  }
  const bool quantize = format == ModelFormat::compressed_tensors;
  const bool quantize_fp8 = format == ModelFormat::compressed_tensors_fp8;
  const bool hf_fp8 = format == ModelFormat::hf_fp8;
  const bool quantize_block = hf_fp8 || format == ModelFormat::compressed_tensors_fp8_block;
  // FP8: every layer e4m3 with one scaling (an FP8 model keeps its own, else per channel, as FP8_DYNAMIC);
  // block-scaled: every layer in `blocks` (a block-scaled model's own, else 128x128).
  const WeightStorage stored = weight_storage(model);
  const ScaleLayout block = blocks ? *blocks : stored.blocks ? *stored.blocks : ScaleLayout::block(128, 128);
  const Model m = with_rope_style(
      quantize_fp8     ? fp8_quantized(model, stored.quantized ? stored.scaling : WeightScaling::per_channel)
      : quantize_block ? fp8_block_quantized(model, block, hf_fp8 ? BlockQuantizer::deepgemm : BlockQuantizer::compressed_tensors)
                       : model,
      RopeStyle::rotate_half);
  const ModelConfig& c = m.config;
  QC_INPUT(c.dtype == "f32" || c.dtype == "bf16", "{}: model dtype `{}`: expected f32 or bf16", out, c.dtype);
  const DType fdt = c.dtype == "bf16" ? DType::bf16 : DType::f32;
  std::vector<std::pair<std::string, Tensor>> tensors;
  auto add = [&](const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
    tensors.emplace_back(name, float_tensor(v, std::move(shape), fdt, name));
  };
  auto add_codes = [&](const std::string& name, DType dtype, const std::vector<int8_t>& q, int64_t n, int64_t k) {
    Tensor tq = Tensor::empty(dtype, {n, k});
    std::memcpy(tq.mutable_bytes().data(), q.data(), q.size());
    tensors.emplace_back(name, std::move(tq));
  };
  auto add_linear = [&](const LinearLayer& l) {
    const std::string key = "model." + l.name;
    if (quantize) {
      QC_INPUT(!l.quantized() || l.weight_type == ElementType::int8,
               "{}: layer `{}` is quantized to {}; the compressed-tensors (int-quantized) format holds int8 codes: "
               "expected an unquantized or INT8 model, found {} (use --format compressed-tensors-fp8)",
               out, l.name, element_type_name(l.weight_type), weight_storage(l).describe());
      std::vector<int8_t> q = l.weight_q;
      std::vector<float> s = l.weight_scale;
      if (!l.quantized()) {
        q.resize(static_cast<size_t>(l.n_out * l.k_in));
        s.resize(static_cast<size_t>(l.n_out));
        quantize_weights_per_channel(l.weight.data(), l.n_out, l.k_in, q.data(), s.data(), weight_scale_dtype_for(c));
      }
      add_codes(key + ".weight", DType::i8, q, l.n_out, l.k_in);
      add(key + ".weight_scale", s, {l.n_out, 1});
    } else if (quantize_block) {
      add_codes(key + ".weight", DType::e4m3, l.weight_q, l.n_out, l.k_in);
      const std::vector<int64_t> shape{block.scale_rows(l.n_out), block.scale_cols(l.k_in)};
      if (hf_fp8) {  // DeepSeek-V3 stores `weight_scale_inv` in fp32 whatever the model dtype
        tensors.emplace_back(key + ".weight_scale_inv", float_tensor(l.weight_scale, shape, DType::f32, key));
      } else {
        add(key + ".weight_scale", l.weight_scale, shape);
      }
    } else if (quantize_fp8) {
      add_codes(key + ".weight", DType::e4m3, l.weight_q, l.n_out, l.k_in);
      if (l.weight_scaling == WeightScaling::per_tensor) {
        // One scale, `[1]` as compressed-tensors stores it; `weight_scale` holds it n_out times.
        QC_CHECK(std::all_of(l.weight_scale.begin(), l.weight_scale.end(), [&](float v) { return v == l.weight_scale[0]; }),
                 "layer `{}`: a per-tensor weight scale that differs between channels", l.name);
        add(key + ".weight_scale", {l.weight_scale[0]}, {1});
      } else {
        add(key + ".weight_scale", l.weight_scale, {l.n_out, 1});
      }
    } else {
      add(key + ".weight", l.weight, {l.n_out, l.k_in});
    }
    if (!l.bias.empty()) add(key + ".bias", l.bias, {l.n_out});
  };
  add("model.embed_tokens.weight", m.embed, {c.vocab, c.hidden});
  for (const DecoderLayer& L : m.layers) {
    const std::string p = "model." + L.q.name.substr(0, L.q.name.find("self_attn"));
    add(p + "input_layernorm.weight", L.attn_norm, {c.hidden});
    add(p + "post_attention_layernorm.weight", L.ffn_norm, {c.hidden});
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", L.q_norm, {c.head_dim});
      add(p + "self_attn.k_norm.weight", L.k_norm, {c.head_dim});
    }
    for (const LinearLayer* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) add_linear(*l);
  }
  add("model.norm.weight", m.final_norm, {c.hidden});
  if (!c.tie_embeddings) add("lm_head.weight", m.lm_head, {c.vocab, c.hidden});
  WeightStorage written = quantize ? WeightStorage{true, ElementType::int8, WeightScaling::per_channel}
                         : quantize_fp8 || quantize_block ? weight_storage(m)
                                                          : WeightStorage{};
  written.hf_fp8 = hf_fp8;
  write_file_atomic((fs::path(tmp.path) / "config.json").string(), hf_config_json(m, written));
  write_safetensors((fs::path(tmp.path) / "model.safetensors").string(), tensors,
                    {{"format", "pt"}});
  tmp.commit(out);
}

}  // namespace qc
