// Operands: layer dicts from Python read into `qc::LayerOperands` (zero-copy views, every dtype and
// shape checked), layers back out as dicts of NumPy views, and the module's operand functions
// (`load_operands`, `save_operands`, `synth`).
#include "ext_common.hpp"

#include <fmt/format.h>

#include <map>
#include <optional>

#include "qconform/error.hpp"
#include "qconform/operands.hpp"
#include "core/operands_io.hpp"
#include "synth/synth.hpp"

using namespace nb::literals;

namespace qc::py {

namespace {

// The arrays a layer built from Python refers to. The last reference may be dropped on a thread
// that does not hold the GIL, and releasing a Python reference needs it: the deleter takes it.
struct PyLayerHold {
  HostArray<int8_t> a_q, w_q;
  HostArray<float> a_scale, w_scale;
  std::optional<HostArray<uint16_t>> bias;
};

std::shared_ptr<const void> hold(std::unique_ptr<PyLayerHold> h) {
  return std::shared_ptr<const void>(h.release(), [](const void* p) {
    auto* held = static_cast<PyLayerHold*>(const_cast<void*>(p));
    if (!Py_IsInitialized()) return;  // interpreter gone: leak rather than touch Python
    nb::gil_scoped_acquire gil;
    delete held;
  });
}

// One layer from a dict {name, a_q, a_scale, w_q, w_scale, bias?, source?, a_type?, w_type?,
// act_scale?, weight_scale?, ue8m0?}: zero-copy views of contiguous arrays, strict checks of every dtype
// and shape. `a_type`/`w_type` ("int8" by default, "e4m3", "e5m2") give the element types; an FP8 operand
// is a uint8 (or int8) array of its bit patterns (`x.view(np.uint8)` of an ml_dtypes float8 array).
// `act_scale`/`weight_scale` give the scale layouts in the operand files' spelling ("per-token" and
// "per-channel" by default; "per-token-group:128" takes a_scale [M, ceil(K/128)], "per-block:128x128"
// w_scale [ceil(N/128), ceil(K/128)]); `ue8m0` True requires every scale to be a power of two.
qc::ElementType element_type_from(const nb::dict& d, const char* key, const std::string& where) {
  if (!d.contains(key) || d[key].is_none()) return qc::ElementType::int8;
  std::string t;
  QC_INPUT(nb::try_cast(d[key], t, false), "{}.{}: expected a string (int8, e4m3 or e5m2)", where, key);
  for (qc::ElementType e : {qc::ElementType::int8, qc::ElementType::e4m3, qc::ElementType::e5m2}) {
    if (t == qc::element_type_name(e)) return e;
  }
  QC_FAIL_INPUT("{}.{}: expected int8, e4m3 or e5m2, found `{}`", where, key, t);
}

}  // namespace

qc::LayerOperands operands_from_dict(nb::handle obj, const std::string& where) {
  nb::dict d;
  QC_INPUT(nb::try_cast(obj, d, false), "{}: expected a dict with keys name, a_q, a_scale, w_q, w_scale and optional bias, found {}",
           where, nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__qualname__"))));
  static const std::vector<std::string> known{"name",   "a_q",    "a_scale",   "w_q",          "w_scale", "bias",
                                              "source", "a_type", "w_type", "act_scale", "weight_scale", "ue8m0"};
  for (auto [key, value] : d) {
    std::string k;
    QC_INPUT(nb::try_cast(key, k, false), "{}: keys must be strings", where);
    QC_INPUT(std::find(known.begin(), known.end(), k) != known.end(),
             "{}: unknown key `{}`; expected name, a_q, a_scale, w_q, w_scale, bias (optional), source (optional), "
             "a_type and w_type (optional: int8, e4m3, e5m2), act_scale and weight_scale (optional: per-token, "
             "per-tensor, per-token-group:<g>; per-channel, per-tensor, per-block:<rows>x<cols>), ue8m0 (optional)",
             where, k);
  }
  std::string name;
  QC_INPUT(d.contains("name") && nb::try_cast(d["name"], name, false), "{}: key `name` (a string) is missing", where);
  const std::string lw = fmt::format("{} (`{}`)", where, name);
  const auto field = [&](const char* key) -> nb::object {
    QC_INPUT(d.contains(key) && !d[key].is_none(), "{}: key `{}` is missing", lw, key);
    return d[key];
  };
  const qc::ElementType a_type = element_type_from(d, "a_type", lw), w_type = element_type_from(d, "w_type", lw);
  const auto codes = [](qc::ElementType t) { return t == qc::ElementType::int8 ? Elem::i8 : Elem::code8; };
  auto h = std::make_unique<PyLayerHold>();
  h->a_q = host_array<int8_t>(as_array(field("a_q"), lw + ".a_q"), lw + ".a_q", codes(a_type), {2});
  h->w_q = host_array<int8_t>(as_array(field("w_q"), lw + ".w_q"), lw + ".w_q", codes(w_type), {2});
  h->a_scale = host_array<float>(as_array(field("a_scale"), lw + ".a_scale"), lw + ".a_scale", Elem::f32, {1, 2});
  h->w_scale = host_array<float>(as_array(field("w_scale"), lw + ".w_scale"), lw + ".w_scale", Elem::f32, {1, 2});
  const int64_t m = h->a_q.dim(0), k = h->a_q.dim(1), n = h->w_q.dim(0);
  QC_INPUT(h->w_q.dim(1) == k, "{}.w_q: expected shape [N,{}] (K of a_q [{},{}]), found [{},{}]", lw, k, m, k, n,
           h->w_q.dim(1));
  const auto layout_from = [&](const char* key, bool weights) {
    if (!d.contains(key) || d[key].is_none()) return weights ? qc::ScaleLayout::per_channel() : qc::ScaleLayout::per_token();
    std::string spec;
    QC_INPUT(nb::try_cast(d[key], spec, false), "{}.{}: expected a string such as {}", lw, key,
             weights ? "\"per-block:128x128\"" : "\"per-token-group:128\"");
    return qc::parse_scale_layout(spec, weights, fmt::format("{}.{}", lw, key));
  };
  qc::ScaleLayout a_scaling = layout_from("act_scale", false), w_scaling = layout_from("weight_scale", true);
  if (d.contains("ue8m0") && !d["ue8m0"].is_none()) {
    bool ue8m0 = false;
    QC_INPUT(nb::try_cast(d["ue8m0"], ue8m0, false), "{}.ue8m0: expected True or False", lw);
    a_scaling.ue8m0 = w_scaling.ue8m0 = ue8m0;
  }
  // A per-row vector [R] or [R,1], or the [rows, cols] matrix of a scale per K group / block.
  const auto scale_shape = [&](const HostArray<float>& s, const qc::ScaleLayout& l, int64_t rows, const char* key,
                               const char* dim) {
    const int64_t r = l.scale_rows(rows), c = l.scale_cols(k);
    if (l.k_blocked()) {
      QC_INPUT(s.shape.size() == 2 && s.dim(0) == r && s.dim(1) == c,
               "{}.{}: expected shape [{},{}] ({} scales: ceil({}/{}) by ceil({}/{})), found {}", lw, key, r, c, l.spec(),
               rows, l.block_rows, k, l.block_k, shape_text(s.array));
      return;
    }
    const bool ok = s.shape.size() == 1 ? s.dim(0) == r : (s.dim(0) == r && s.dim(1) == 1);
    QC_INPUT(ok, "{}.{}: expected shape [{}] or [{},1] ({} = {}), found {}{}", lw, key, r, r, dim, r, shape_text(s.array),
             s.shape.size() == 2 && s.dim(1) > 1 ? fmt::format("; a scale per K group or block needs the key `{}`",
                                                              std::string_view(key) == "a_scale" ? "act_scale" : "weight_scale")
                                                  : std::string());
  };
  scale_shape(h->a_scale, a_scaling, m, "a_scale", "M");
  scale_shape(h->w_scale, w_scaling, n, "w_scale", "N");
  if (d.contains("bias") && !d["bias"].is_none()) {
    h->bias = host_array<uint16_t>(as_array(d["bias"], lw + ".bias"), lw + ".bias", Elem::bf16, {1});
    QC_INPUT(h->bias->dim(0) == n, "{}.bias: expected shape [{}] (N), found [{}]", lw, n, h->bias->dim(0));
  }
  std::string source = "python";
  if (d.contains("source") && !d["source"].is_none()) {
    QC_INPUT(nb::try_cast(d["source"], source, false), "{}.source: expected a string", lw);
  }
  qc::LayerOperands ops;
  ops.name = name;
  ops.m = m;
  ops.n = n;
  ops.k = k;
  ops.a_q = h->a_q.data;
  ops.w_q = h->w_q.data;
  ops.a_scale = h->a_scale.data;
  ops.w_scale = h->w_scale.data;
  if (h->bias) ops.bias = h->bias->data;
  ops.source = source;
  ops.a_type = a_type;
  ops.w_type = w_type;
  ops.a_scaling = a_scaling;
  ops.w_scaling = w_scaling;
  ops.keepalive = hold(std::move(h));
  ops.validate();  // an INT8/FP8 mix, NaN/inf codes and scales off their layout are input errors here
  return ops;
}

// `operands`: a path (str; the Python layer turns PathLike into str) or a sequence of layer dicts.
OperandsIn operands_in(nb::handle operands) {
  OperandsIn in;
  std::string path;
  if (nb::try_cast(operands, path, false)) {
    qc::OperandSet set = qc::load_operands(path);
    in.layers = std::move(set.layers);
    in.path = set.path;
    in.sha256 = set.sha256;
    in.from_file = true;
    return in;
  }
  nb::list list;
  QC_INPUT(nb::try_cast(operands, list, false),
           "operands: expected a path to a safetensors operands file or a list of layer dicts, found {}",
           nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(operands.ptr()))).attr("__qualname__"))));
  QC_INPUT(nb::len(list) > 0, "operands: expected at least one layer, found an empty list");
  for (size_t i = 0; i < nb::len(list); ++i) in.layers.push_back(operands_from_dict(list[i], fmt::format("layers[{}]", i)));
  in.path = "<python>";
  return in;
}

// The NumPy shape of an operand's scales: [rows], or [scale rows, scale columns] when they act per K block.
std::vector<size_t> scale_dims(const qc::ScaleLayout& l, int64_t rows, int64_t k) {
  return l.k_blocked() ? std::vector<size_t>{static_cast<size_t>(l.scale_rows(rows)), static_cast<size_t>(l.scale_cols(k))}
                       : std::vector<size_t>{static_cast<size_t>(rows)};
}

nb::dict layer_to_dict(const qc::LayerOperands& l) {
  const size_t m = static_cast<size_t>(l.m), n = static_cast<size_t>(l.n), k = static_cast<size_t>(l.k);
  nb::dict d;
  d["name"] = l.name;
  // FP8 codes come out as uint8 bit patterns (view them as ml_dtypes float8), INT8 codes as int8.
  d["a_q"] = l.fp8() ? numpy_view(l.a_codes(), {m, k}, l.keepalive) : numpy_view(l.a_q, {m, k}, l.keepalive);
  d["a_scale"] = numpy_view(l.a_scale, scale_dims(l.a_scaling, l.m, l.k), l.keepalive);
  d["w_q"] = l.fp8() ? numpy_view(l.w_codes(), {n, k}, l.keepalive) : numpy_view(l.w_q, {n, k}, l.keepalive);
  d["w_scale"] = numpy_view(l.w_scale, scale_dims(l.w_scaling, l.n, l.k), l.keepalive);
  d["bias"] = l.has_bias() ? numpy_view(l.bias, {n}, l.keepalive) : nb::none();
  d["source"] = l.source;
  d["a_type"] = std::string(qc::element_type_name(l.a_type));
  d["w_type"] = std::string(qc::element_type_name(l.w_type));
  d["act_scale"] = l.a_scaling.spec();
  d["weight_scale"] = l.w_scaling.spec();
  d["ue8m0"] = l.a_scaling.ue8m0 && l.w_scaling.ue8m0;
  return d;
}

// Operands: synthesis, files.
void bind_operands(nb::module_& m) {
  // ---- operands ----
  m.def(
      "load_operands",
      [](const std::string& path, bool with_digest) {
        qc::OperandSet set = qc::load_operands(path, with_digest);
        nb::list layers;
        for (const qc::LayerOperands& l : set.layers) layers.append(layer_to_dict(l));
        nb::dict d;
        d["path"] = set.path;
        d["sha256"] = set.sha256;
        d["metadata"] = set.metadata;
        d["layers"] = layers;
        return d;
      },
      "path"_a, "with_digest"_a = true);
  m.def(
      "save_operands",
      [](const std::string& path, nb::handle layers, std::map<std::string, std::string> metadata) {
        const OperandsIn in = operands_in(layers);
        without_gil([&] { qc::save_operands(path, in.layers, std::move(metadata)); });
      },
      "path"_a, "layers"_a, "metadata"_a);
  m.def(
      "synth",
      [](const std::string& shapes, int64_t m_rows, uint64_t seed, bool bias, double outlier_fraction,
         double outlier_gain, double weight_sigma, const std::string& act_quantizer, int threads,
         const std::string& element, const std::string& act_scale, const std::string& weight_scale,
         const std::string& weight_quantizer, bool ue8m0) {
        qc::SynthOptions o;
        o.weight_quantizer = weight_quantizer;
        o.ue8m0 = ue8m0;
        o.shapes = shapes;
        o.m = m_rows;
        o.seed = seed;
        o.bias = bias;
        o.outlier_fraction = outlier_fraction;
        o.outlier_gain = outlier_gain;
        o.weight_sigma = weight_sigma;
        o.act_quantizer = act_quantizer;
        o.threads = threads;
        o.element = element;
        o.act_scale = act_scale;
        o.weight_scale = weight_scale;
        QC_INPUT(m_rows > 0, "m: expected a positive number of rows, found {}", m_rows);
        const std::vector<qc::LayerOperands> layers = without_gil([&] { return qc::synth_operands(o); });
        nb::list out;
        for (const qc::LayerOperands& l : layers) out.append(layer_to_dict(l));
        return out;
      },
      "shapes"_a, "m"_a, "seed"_a, "bias"_a, "outlier_fraction"_a, "outlier_gain"_a, "weight_sigma"_a,
      "act_quantizer"_a, "threads"_a, "element"_a = "int8",
      "act_scale"_a = "per-token", "weight_scale"_a = "per-channel", "weight_quantizer"_a = "deepgemm",
      "ue8m0"_a = false);
}

}  // namespace qc::py
