// Block-scaled FP8 checkpoint configs (hf_block.hpp).
#include "model/hf_block.hpp"

#include <fmt/format.h>

#include <set>

#include "qconform/error.hpp"

namespace qc {

namespace {

// [b_n, b_k], two positive integers below 2^31.
ScaleLayout block_of(const std::string& file, const nlohmann::json* v, const std::string& where) {
  QC_INPUT(v && v->is_array() && v->size() == 2 && (*v)[0].is_number_integer() && (*v)[1].is_number_integer() &&
               (*v)[0].get<int64_t>() > 0 && (*v)[1].get<int64_t>() > 0 && (*v)[0].get<int64_t>() < (int64_t{1} << 31) &&
               (*v)[1].get<int64_t>() < (int64_t{1} << 31),
           "{}: field `{}`: expected [rows, cols], two positive integers (e.g. [128, 128]), found {}", file, where,
           v ? v->dump() : std::string("nothing"));
  return ScaleLayout::block((*v)[0].get<int64_t>(), (*v)[1].get<int64_t>());
}

const nlohmann::json* member(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

// `key` of `j` equals `want` (a missing key is `nothing`).
void expect(const std::string& file, const nlohmann::json& j, const std::string& where, const char* key,
            const nlohmann::json& want) {
  const nlohmann::json* v = member(j, key);
  QC_INPUT(v && *v == want, "{}: field `{}.{}`: expected {}, found {}", file, where, key, want.dump(),
           v ? v->dump() : std::string("nothing"));
}

}  // namespace

bool is_hf_fp8_config(const nlohmann::json& q) {
  return q.is_object() && q.contains("quant_method") && q["quant_method"] == "fp8";
}

WeightStorage validate_hf_fp8_config(const std::string& file, const nlohmann::json& q) {
  static const std::set<std::string> known{"quant_method", "fmt", "activation_scheme", "weight_block_size",
                                           "modules_to_not_convert", "ignored_layers", "scale_fmt"};
  for (const auto& [key, value] : q.items()) {
    QC_INPUT(known.count(key), "{}: field `quantization_config.{}`: not a field of the Hugging Face fp8 format qconform "
             "reads (quant_method, fmt, activation_scheme, weight_block_size, modules_to_not_convert, ignored_layers, "
             "scale_fmt)",
             file, key);
  }
  expect(file, q, "quantization_config", "activation_scheme", "dynamic");
  if (const nlohmann::json* fmt = member(q, "fmt")) {
    QC_INPUT(*fmt == "e4m3", "{}: field `quantization_config.fmt`: expected \"e4m3\", found {}", file, fmt->dump());
  }
  QC_INPUT(q.contains("weight_block_size"),
           "{}: field `quantization_config.weight_block_size`: expected [rows, cols] (a block-scaled checkpoint); found "
           "nothing: per-tensor Hugging Face fp8 checkpoints are not read (use a compressed-tensors FP8 one)",
           file);
  ScaleLayout blocks = block_of(file, member(q, "weight_block_size"), "quantization_config.weight_block_size");
  for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
    const nlohmann::json* v = member(q, key);
    QC_INPUT(!v || v->is_null() || (v->is_array() && (v->empty() || *v == nlohmann::json::array({"lm_head"}))),
             "{}: field `quantization_config.{}`: expected null, [] or [\"lm_head\"] (every decoder linear layer "
             "block-quantized), found {}",
             file, key, v ? v->dump() : std::string());
  }
  if (const nlohmann::json* s = member(q, "scale_fmt")) {
    QC_INPUT(s->is_null() || *s == "ue8m0", "{}: field `quantization_config.scale_fmt`: expected null or \"ue8m0\", "
             "found {}", file, s->dump());
    blocks.ue8m0 = *s == "ue8m0";
  }
  WeightStorage w;
  w.quantized = true;
  w.type = ElementType::e4m3;
  w.blocks = blocks;
  w.hf_fp8 = true;
  return w;
}

bool is_compressed_tensors_block_group(const nlohmann::json& group) {
  const nlohmann::json* w = member(group, "weights");
  return w && w->is_object() && w->contains("strategy") && (*w)["strategy"] == "block";
}

WeightStorage validate_compressed_tensors_block_group(const std::string& file, const nlohmann::json& group,
                                                      const std::string& where) {
  const nlohmann::json& w = group.at("weights");
  const std::string ww = where + ".weights";
  for (const auto& [key, want] : std::initializer_list<std::pair<const char*, nlohmann::json>>{
           {"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"dynamic", false}}) {
    expect(file, w, ww, key, want);
  }
  const ScaleLayout blocks = block_of(file, member(w, "block_structure"), ww + ".block_structure");
  for (const char* key : {"group_size", "actorder"}) {
    const nlohmann::json* v = member(w, key);
    QC_INPUT(!v || v->is_null() || *v == false, "{}: field `{}.{}`: expected null, found {}", file, ww, key, v->dump());
  }
  const nlohmann::json* a = member(group, "input_activations");
  QC_INPUT(a && a->is_object(), "{}: field `{}.input_activations`: expected the dynamic per-token-group FP8 scheme, "
           "found {}", file, where, a ? a->dump() : std::string("nothing"));
  const std::string aw = where + ".input_activations";
  for (const auto& [key, want] : std::initializer_list<std::pair<const char*, nlohmann::json>>{
           {"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "group"}, {"dynamic", true},
           {"group_size", blocks.block_k}}) {
    expect(file, *a, aw, key, want);
  }
  WeightStorage s;
  s.quantized = true;
  s.type = ElementType::e4m3;
  s.blocks = blocks;
  return s;
}

nlohmann::ordered_json block_quantization_config(const WeightStorage& weights) {
  QC_CHECK(weights.blocks.has_value(), "block_quantization_config of an unblocked storage");
  const ScaleLayout& b = *weights.blocks;
  if (weights.hf_fp8) {
    nlohmann::ordered_json q = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {b.block_rows, b.block_k}}};
    if (b.ue8m0) q["scale_fmt"] = "ue8m0";
    return q;
  }
  const nlohmann::ordered_json scheme_w = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "block"},
                                           {"dynamic", false}, {"group_size", nullptr},
                                           {"block_structure", {b.block_rows, b.block_k}}, {"actorder", nullptr},
                                           {"observer", "minmax"}, {"observer_kwargs", nlohmann::ordered_json::object()}};
  const nlohmann::ordered_json scheme_a = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "group"},
                                           {"dynamic", true}, {"group_size", b.block_k}, {"block_structure", nullptr},
                                           {"actorder", nullptr}, {"observer", nullptr},
                                           {"observer_kwargs", nlohmann::ordered_json::object()}};
  return {{"config_groups",
           {{"group_0",
             {{"input_activations", scheme_a}, {"output_activations", nullptr}, {"targets", {"Linear"}},
              {"weights", scheme_w}, {"format", "float-quantized"}}}}},
          {"format", "float-quantized"},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"}};
}

}  // namespace qc
