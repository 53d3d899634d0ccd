// config.json of a Hugging Face-layout model: parsed (strict) and written (hf_config.hpp).
#include "model/hf_config.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "core/fileio.hpp"
#include "core/limits.hpp"
#include "model/hf_block.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

const nlohmann::json* field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t int_field(const std::string& file, const nlohmann::json& j, const char* name, std::optional<int64_t> def) {
  const nlohmann::json* v = field(j, name);
  if (!v) {
    QC_INPUT(def.has_value(), "{}: field `{}`: expected a positive integer, found nothing", file, name);
    return *def;
  }
  QC_INPUT(v->is_number_integer() && v->get<int64_t>() > 0, "{}: field `{}`: expected a positive integer, found {}",
           file, name, v->dump());
  return v->get<int64_t>();
}

double number_field(const std::string& file, const nlohmann::json& j, const char* name, double def) {
  const nlohmann::json* v = field(j, name);
  if (!v) return def;
  QC_INPUT(v->is_number(), "{}: field `{}`: expected a number, found {}", file, name, v->dump());
  return v->get<double>();
}

bool bool_field(const std::string& file, const nlohmann::json& j, const char* name, bool def) {
  const nlohmann::json* v = field(j, name);
  if (!v) return def;
  QC_INPUT(v->is_boolean(), "{}: field `{}`: expected true or false, found {}", file, name, v->dump());
  return v->get<bool>();
}

// Strict check of one compressed-tensors quantization scheme (`weights` or `input_activations`).
void check_scheme(const std::string& file, const nlohmann::json& scheme, const std::string& where,
                  const std::map<std::string, nlohmann::json>& required) {
  QC_INPUT(scheme.is_object(), "{}: field `{}`: expected an object, found {}", file, where, scheme.dump());
  for (const auto& [key, want] : required) {
    const auto it = scheme.find(key);
    QC_INPUT(it != scheme.end() && *it == want, "{}: field `{}.{}`: expected {}, found {}", file, where, key,
             want.dump(), it == scheme.end() ? std::string("nothing") : it->dump());
  }
  // Fields that change the arithmetic must be absent or null.
  for (const char* key : {"group_size", "block_structure", "actorder"}) {
    const auto it = scheme.find(key);
    QC_INPUT(it == scheme.end() || it->is_null() || (std::string(key) == "actorder" && *it == false),
             "{}: field `{}.{}`: expected null (per-channel / per-token W8A8 only), found {}", file, where, key,
             it->dump());
  }
}

// The compressed-tensors W8A8 configurations: "int-quantized" (`../shared/reference/production-epilogues.md`)
// and "float-quantized" (FP8 weights per channel or per tensor, dynamic per-token FP8 activations: what
// llm-compressor's FP8_DYNAMIC scheme writes); anything else is an input error naming the field.
// Returns how the linear layers' weights are stored.
WeightStorage validate_quantization_config(const std::string& file, const nlohmann::json& q) {
  QC_INPUT(q.is_object(), "{}: field `quantization_config`: expected an object, found {}", file, q.dump());
  auto expect_string = [&](const char* key, const char* want) {
    const nlohmann::json* v = field(q, key);
    QC_INPUT(v && *v == want, "{}: field `quantization_config.{}`: expected \"{}\", found {}", file, key, want,
             v ? v->dump() : std::string("nothing"));
  };
  expect_string("quant_method", "compressed-tensors");
  const nlohmann::json* format = field(q, "format");
  QC_INPUT(format && (*format == "int-quantized" || *format == "float-quantized"),
           "{}: field `quantization_config.format`: expected \"int-quantized\" (INT8) or \"float-quantized\" (FP8), "
           "found {}",
           file, format ? format->dump() : std::string("nothing"));
  const bool fp8 = *format == "float-quantized";
  if (const nlohmann::json* status = field(q, "quantization_status")) {
    QC_INPUT(*status == "compressed" || *status == "frozen",
             "{}: field `quantization_config.quantization_status`: expected \"compressed\", found {}", file,
             status->dump());
  }
  for (const char* key : {"kv_cache_scheme", "sparsity_config", "transform_config"}) {
    const nlohmann::json* v = field(q, key);
    QC_INPUT(!v || (v->is_object() && v->empty()), "{}: field `quantization_config.{}`: expected null, found {}",
             file, key, v ? v->dump() : "");
  }
  if (const nlohmann::json* ignore = field(q, "ignore")) {
    QC_INPUT(ignore->is_array(), "{}: field `quantization_config.ignore`: expected an array, found {}", file,
             ignore->dump());
    for (const auto& name : *ignore) {
      QC_INPUT(name == "lm_head",
               "{}: field `quantization_config.ignore`: expected only \"lm_head\" (every decoder linear layer "
               "quantized), found {}",
               file, name.dump());
    }
  }
  const nlohmann::json* groups = field(q, "config_groups");
  QC_INPUT(groups && groups->is_object() && groups->size() == 1,
           "{}: field `quantization_config.config_groups`: expected an object with exactly one group, found {}", file,
           groups ? groups->dump() : std::string("nothing"));
  const std::string gname = groups->begin().key();
  const nlohmann::json& g = groups->begin().value();
  const std::string where = "quantization_config.config_groups." + gname;
  QC_INPUT(g.is_object(), "{}: field `{}`: expected an object, found {}", file, where, g.dump());
  if (const nlohmann::json* f = field(g, "format")) {
    QC_INPUT(*f == *format, "{}: field `{}.format`: expected {} (as `quantization_config.format`), found {}", file,
             where, format->dump(), f->dump());
  }
  const nlohmann::json* targets = field(g, "targets");
  QC_INPUT(targets && *targets == nlohmann::json::array({"Linear"}),
           "{}: field `{}.targets`: expected [\"Linear\"], found {}", file, where,
           targets ? targets->dump() : std::string("nothing"));
  const nlohmann::json* out_act = field(g, "output_activations");
  QC_INPUT(!out_act, "{}: field `{}.output_activations`: expected null, found {}", file, where,
           out_act ? out_act->dump() : "");
  if (fp8 && is_compressed_tensors_block_group(g)) return validate_compressed_tensors_block_group(file, g, where);
  // The element type: compressed-tensors' `type` "int" with 8 bits is int8, "float" with 8 bits is
  // float8_e4m3fn (the only FP8 type its float-quantized compressor writes).
  const char* type = fp8 ? "float" : "int";
  const nlohmann::json* w = field(g, "weights");
  QC_INPUT(w, "{}: field `{}.weights`: expected the {} weight scheme, found nothing", file, where,
           fp8 ? "FP8 per-channel or per-tensor" : "int8 per-channel");
  check_scheme(file, *w, where + ".weights", {{"num_bits", 8}, {"type", type}, {"symmetric", true}, {"dynamic", false}});
  WeightStorage storage{true, fp8 ? ElementType::e4m3 : ElementType::int8, WeightScaling::per_channel};
  const nlohmann::json* strategy = field(*w, "strategy");
  if (fp8 && strategy && *strategy == "tensor") {
    storage.scaling = WeightScaling::per_tensor;
  } else {
    QC_INPUT(strategy && *strategy == "channel", "{}: field `{}.weights.strategy`: expected {}, found {}", file, where,
             fp8 ? "\"channel\" or \"tensor\"" : "\"channel\"", strategy ? strategy->dump() : std::string("nothing"));
  }
  const nlohmann::json* a = field(g, "input_activations");
  QC_INPUT(a, "{}: field `{}.input_activations`: expected the {} per-token dynamic scheme, found nothing", file,
           where, fp8 ? "FP8" : "int8");
  check_scheme(file, *a, where + ".input_activations",
               {{"num_bits", 8}, {"type", type}, {"symmetric", true}, {"strategy", "token"}, {"dynamic", true}});
  return storage;
}



}  // namespace

HfHeader parse_config(const std::string& file) {
  const nlohmann::json j = parse_json(read_file(file), file);
  QC_INPUT(j.is_object(), "{}: expected a JSON object, found {}", file, j.type_name());
  HfHeader h;
  ModelConfig& c = h.config;
  const nlohmann::json* type = field(j, "model_type");
  QC_INPUT(type && type->is_string() && (*type == "llama" || *type == "qwen2" || *type == "qwen3"),
           "{}: field `model_type`: expected \"llama\", \"qwen2\" or \"qwen3\", found {}", file,
           type ? type->dump() : std::string("nothing"));
  c.arch = type->get<std::string>();
  c.hidden = int_field(file, j, "hidden_size", std::nullopt);
  c.intermediate = int_field(file, j, "intermediate_size", std::nullopt);
  c.n_layers = int_field(file, j, "num_hidden_layers", std::nullopt);
  c.n_heads = int_field(file, j, "num_attention_heads", std::nullopt);
  c.n_kv_heads = int_field(file, j, "num_key_value_heads", c.n_heads);
  QC_INPUT(c.hidden % c.n_heads == 0 || field(j, "head_dim"),
           "{}: field `head_dim`: expected it (hidden_size {} is not a multiple of num_attention_heads {}), found "
           "nothing",
           file, c.hidden, c.n_heads);
  c.head_dim = int_field(file, j, "head_dim", c.hidden / c.n_heads);
  c.vocab = int_field(file, j, "vocab_size", std::nullopt);
  c.max_seq_len = int_field(file, j, "max_position_embeddings", std::nullopt);
  c.rope_theta = number_field(file, j, "rope_theta", 10000.0);
  c.rms_eps = static_cast<float>(number_field(file, j, "rms_norm_eps", 1e-6));
  c.tie_embeddings = bool_field(file, j, "tie_word_embeddings", false);
  c.rope_style = RopeStyle::rotate_half;
  c.qk_norm = c.arch == "qwen3";
  c.qkv_bias = c.arch == "qwen2";
  if (const nlohmann::json* act = field(j, "hidden_act")) {
    QC_INPUT(*act == "silu", "{}: field `hidden_act`: expected \"silu\" (SwiGLU), found {}", file, act->dump());
  }
  if (const nlohmann::json* rs = field(j, "rope_scaling")) {
    QC_FAIL_INPUT("{}: field `rope_scaling`: expected null (plain RoPE), found {}", file, rs->dump());
  }
  QC_INPUT(!bool_field(file, j, "attention_bias", false),
           "{}: field `attention_bias`: expected false ({} has no bias on q/k/v/o{}), found true", file, c.arch,
           c.arch == "qwen2" ? " beyond Qwen2's fixed q/k/v bias" : "");
  QC_INPUT(!bool_field(file, j, "mlp_bias", false), "{}: field `mlp_bias`: expected false, found true", file);
  if (const nlohmann::json* dt = field(j, "torch_dtype")) {
    QC_INPUT(*dt == "float32" || *dt == "bfloat16", "{}: field `torch_dtype`: expected \"float32\" or \"bfloat16\", found {}",
             file, dt->dump());
    h.torch_dtype = dt->get<std::string>();
  }
  c.bos_id = 1;
  if (const nlohmann::json* bos = field(j, "bos_token_id")) {
    QC_INPUT(bos->is_number_integer(), "{}: field `bos_token_id`: expected an integer, found {}", file, bos->dump());
    c.bos_id = bos->get<int32_t>();
  }
  if (const nlohmann::json* eos = field(j, "eos_token_id")) {
    const nlohmann::json list = eos->is_array() ? *eos : nlohmann::json::array({*eos});
    for (const auto& e : list) {
      QC_INPUT(e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() < c.vocab,
               "{}: field `eos_token_id`: expected ids in [0, {}), found {}", file, c.vocab, eos->dump());
      c.stop_ids.push_back(e.get<int32_t>());
    }
  }
  if (const nlohmann::json* q = field(j, "quantization_config")) {
    h.weights = is_hf_fp8_config(*q) ? validate_hf_fp8_config(file, *q) : validate_quantization_config(file, *q);
  }
  c.validate(file);
  return h;
}

// `weights`: unquantized (no quantization_config), or the compressed-tensors config of an int-quantized
// or float-quantized checkpoint, as llm-compressor writes it (W8A8 INT8, FP8_DYNAMIC).
std::string hf_config_json(const Model& m, const WeightStorage& weights) {
  const ModelConfig& c = m.config;
  const std::string type = c.qk_norm ? "qwen3" : c.qkv_bias ? "qwen2" : "llama";
  QC_CHECK(!(c.qk_norm && c.qkv_bias), "no Hugging Face architecture has both QK-norm and a q/k/v bias");
  const char* arch = type == "qwen3" ? "Qwen3ForCausalLM" : type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  nlohmann::ordered_json j;
  j["architectures"] = {arch};
  j["model_type"] = type;
  j["hidden_size"] = c.hidden;
  j["intermediate_size"] = c.intermediate;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab;
  j["max_position_embeddings"] = c.max_seq_len;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  j["rms_norm_eps"] = static_cast<double>(c.rms_eps);  // reads back to the same float
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["torch_dtype"] = c.dtype == "bf16" ? "bfloat16" : "float32";
  j["bos_token_id"] = c.bos_id;
  if (c.stop_ids.size() == 1) j["eos_token_id"] = c.stop_ids[0];
  else if (!c.stop_ids.empty()) j["eos_token_id"] = c.stop_ids;
  if (weights.blocks) {
    j["quantization_config"] = block_quantization_config(weights);
  } else if (weights.quantized) {
    const bool fp8 = weights.type != ElementType::int8;
    const char* type = fp8 ? "float" : "int";
    const char* format = fp8 ? "float-quantized" : "int-quantized";
    const char* strategy = weights.scaling == WeightScaling::per_tensor ? "tensor" : "channel";
    const nlohmann::ordered_json scheme_w = {{"num_bits", 8}, {"type", type}, {"symmetric", true}, {"strategy", strategy},
                                             {"dynamic", false}, {"group_size", nullptr}, {"block_structure", nullptr},
                                             {"actorder", nullptr}, {"observer", "minmax"}, {"observer_kwargs", nlohmann::ordered_json::object()}};
    const nlohmann::ordered_json scheme_a = {{"num_bits", 8}, {"type", type}, {"symmetric", true}, {"strategy", "token"},
                                             {"dynamic", true}, {"group_size", nullptr}, {"block_structure", nullptr},
                                             {"actorder", nullptr}, {"observer", nullptr}, {"observer_kwargs", nlohmann::ordered_json::object()}};
    j["quantization_config"] = {
        {"config_groups",
         {{"group_0",
           {{"input_activations", scheme_a}, {"output_activations", nullptr}, {"targets", {"Linear"}},
            {"weights", scheme_w}, {"format", format}}}}},
        {"format", format},
        {"ignore", {"lm_head"}},
        {"kv_cache_scheme", nullptr},
        {"quant_method", "compressed-tensors"},
        {"quantization_status", "compressed"}};
  }
  return j.dump(2) + "\n";
}

}  // namespace qc
