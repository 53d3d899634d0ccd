// Arms: `qconform.Arm` over the C++ arms, and `PythonArm`, a C++ `Arm` whose kernel is a Python
// callable, so that verify and boundary treat a Python kernel exactly like a built-in one.
#include "ext_common.hpp"

#include <fmt/format.h>

#include <optional>

#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "accum/fp8_model.hpp"
#include "epilogue/block_models.hpp"

using namespace nb::literals;

namespace qc::py {

namespace {

nb::dict info_to_dict(const qc::ArmInfo& i) {
  nb::dict d;
  d["label"] = i.label;
  d["description"] = i.description;
  d["epilogue"] = i.epilogue;
  d["exposes_accumulator"] = i.exposes_accumulator;
  d["is_mutant"] = i.is_mutant;
  d["breaks_stage"] = i.breaks_stage;
  d["accumulation_model"] = i.accumulation_model;  // FP8 arms: the declared model (docs/accumulation.md); "" otherwise
  d["element"] = std::string(qc::element_type_name(i.element));  // "e4m3" for every FP8 arm, declared or not
  d["fp8"] = i.fp8();
  d["unscaled_entry"] = i.offers_unscaled();
  d["block_size"] = nb::make_tuple(i.block_n, i.block_k);  // block-scaled arms: the scale block they take ((0, 0): any)
  d["block_scaled"] = i.block();  // takes block-scaled layers (a block model declared, or undeclared)
  return d;
}

nb::object record_to_py(const qc::RunRecord& r) {
  nlohmann::json j;
  qc::to_json(j, r);
  return json_to_py(j);
}

std::string type_qualname(nb::handle obj) {
  return nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__qualname__")));
}

// What a Python callable is (`qconform.arm`, which reads it from the callable's signature and the
// arguments given): an INT8 kernel `fn(a_q, a_scale, w_q, w_scale, bias) -> y`; an FP8 GEMM
// `fn(a, w) -> d` (the unscaled fp32 result; qconform applies `fp8-scaled`); or an FP8 kernel with the
// INT8 signature over e4m3 codes, scales in and bf16 out (its epilogue its own), optionally with its
// unscaled GEMM beside it (`accumulate=`).
enum class PyArmKind { int8, fp8_gemm, fp8_kernel, fp8_block };

PyArmKind py_arm_kind(const std::string& kind) {
  if (kind == "int8") return PyArmKind::int8;
  if (kind == "fp8-gemm") return PyArmKind::fp8_gemm;
  if (kind == "fp8-block") return PyArmKind::fp8_block;
  QC_INPUT(kind == "fp8-kernel", "python_arm: kind: expected int8, fp8-gemm, fp8-kernel or fp8-block, found `{}`", kind);
  return PyArmKind::fp8_kernel;
}

// An arm whose kernel is a Python callable (`PyArmKind`). The operands reach `fn` as read-only NumPy
// views (no copy; FP8 codes as uint8 bit patterns); `normalize(obj)` (from the Python layer) turns
// torch tensors and ml_dtypes arrays into NumPy arrays that nanobind can read; then the output is
// checked strictly: [M,N] bf16, [M,N] int32 for an INT8 kernel's accumulator, [M,N] float32 for d.
class PythonArm final : public qc::Arm {
 public:
  PythonArm(nb::callable fn, nb::object accumulate, nb::callable normalize, qc::ArmInfo info, qc::RunRecord record,
            PyArmKind kind)
      : fn_(std::move(fn)), accumulate_(std::move(accumulate)), normalize_(std::move(normalize)), info_(std::move(info)),
        record_(std::move(record)), kind_(kind) {
    if (kind_ == PyArmKind::fp8_block) {
      // A block-scaled FP8 callable: d = fn(a, w, a_scale, w_scale, block_size) is its fp32 D, which
      // qconform rounds to bf16 (RNE) and exposes to verify; the block model must be one qconform knows.
      (void)qc::fp8_block_model(info_.accumulation_model);
      QC_INPUT(info_.epilogue.empty() && !info_.exposes_accumulator,
               "arm `{}`: a block-scaled FP8 callable (accumulation_model=\"{}\") returns its fp32 D, which qconform "
               "rounds to bf16; expected no epilogue and exposes_accumulator=False, found epilogue \"{}\" and "
               "exposes_accumulator={}",
               info_.label, info_.accumulation_model, info_.epilogue, info_.exposes_accumulator);
      info_.element = qc::ElementType::e4m3;
      return;
    }
    if (info_.block()) {
      // A block-scaled FP8 kernel of the INT8 signature (its y is bf16): a declared block model is one
      // qconform knows, and the scales and the bf16 rounding are the model's: no epilogue of its own.
      QC_INPUT(kind_ == PyArmKind::fp8_kernel && info_.epilogue.empty() && !info_.exposes_accumulator &&
                   (accumulate_.is_none() || !accumulate_.is_valid()),
               "arm `{}`: a block-scaled FP8 kernel fn(a_q, a_scale, w_q, w_scale, bias) -> y (block_size with "
               "element=\"e4m3\") takes no epilogue, exposes_accumulator or accumulate: its scales act inside the "
               "accumulation",
               info_.label);
      if (!info_.accumulation_model.empty()) (void)qc::fp8_block_model(info_.accumulation_model);
      info_.element = qc::ElementType::e4m3;
      return;
    }
    if (!info_.accumulation_model.empty()) {
      // A declared model must be one qconform can evaluate (unknown names: InputError listing them).
      (void)qc::fp8_accumulation_model(info_.accumulation_model);
    }
    if (kind_ == PyArmKind::int8) {
      if (!info_.epilogue.empty()) {
        const qc::Epilogue& e = qc::epilogue(info_.epilogue);  // unknown names: InputError listing the valid ones
        QC_INPUT(e.name != qc::fp8_epilogue().name && !(e.kind == qc::EpilogueKind::point && e.space.input == qc::FormulaInput::fp32),
                 "arm `{}`: epilogue: \"{}\" is an FP8 formula (over d); an INT8 callable's epilogue is written over acc, "
                 "or pass element=\"e4m3\" for an FP8 kernel",
                 info_.label, info_.epilogue);
      }
      return;
    }
    info_.element = qc::ElementType::e4m3;
    QC_INPUT(!info_.exposes_accumulator,
             "arm `{}`: exposes_accumulator=True: an FP8 callable has no INT32 accumulator; expected "
             "exposes_accumulator=False (an FP8 kernel offers its fp32 GEMM as accumulate=fn(a, w) -> d)",
             info_.label);
    const std::string fp8 = std::string(qc::fp8_epilogue().name);
    if (kind_ == PyArmKind::fp8_gemm) {
      // The callable returns the unscaled fp32 GEMM; qconform applies the FP8 epilogue, as every FP8 arm does.
      QC_INPUT(info_.epilogue.empty() || info_.epilogue == fp8,
               "arm `{}`: epilogue: an FP8 callable fn(a, w) -> d returns the unscaled fp32 GEMM and qconform applies the "
               "`{}` epilogue; expected no epilogue or \"{}\", found \"{}\" (a kernel with its own epilogue takes "
               "fn(a_q, a_scale, w_q, w_scale, bias) -> y)",
               info_.label, fp8, fp8, info_.epilogue);
      info_.epilogue = fp8;
      record_.epilogue = fp8;
      info_.unscaled_entry = true;
      return;
    }
    // An FP8 kernel: its epilogue is its own, declared (a formula over the fp32 `d`) or not.
    if (!info_.epilogue.empty()) {
      const qc::Epilogue& e = qc::epilogue(info_.epilogue);
      QC_INPUT(e.name == fp8 || (e.kind == qc::EpilogueKind::point && e.space.input == qc::FormulaInput::fp32),
               "arm `{}`: epilogue: \"{}\" is a formula over an integer accumulator; an FP8 kernel's epilogue is written "
               "over the fp32 GEMM result d, e.g. \"bf16(rn32(rn32(d * sa) * sw))\"",
               info_.label, info_.epilogue);
    }
    info_.unscaled_entry = accumulate_.is_valid() && !accumulate_.is_none();
  }

  qc::ArmInfo info() const override { return info_; }

  qc::ArmOutput run(const qc::LayerOperands& ops) override {
    // An INT8 callable refuses FP8 layers, as the built-in INT8 arms do.
    qc::check_arm_takes_layer(info_, ops);
    const std::string context = fmt::format("layer `{}` ({}x{}x{})", ops.name, ops.m, ops.n, ops.k);
    return guarded(context, context, [&] {
      if (kind_ == PyArmKind::fp8_block) return run_block_with_gil(ops);
      if (kind_ == PyArmKind::fp8_gemm) return run_fp8_with_gil(ops);
      return run_with_gil(ops);
    });
  }

  // FP8 callables: d = fn(a, w) (an FP8 GEMM) or accumulate(a, w) (an FP8 kernel's unscaled entry),
  // a [m,k] and w [n,k] e4m3 codes (uint8), d float32 [m,n].
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int /*threads*/) override {
    if (kind_ == PyArmKind::int8) return qc::Arm::fp8_accumulate(a, w, m, n, k, record, 0);  // the INT8 refusal
    QC_INPUT(kind_ != PyArmKind::fp8_block,
             "arm `{}` is a block-scaled FP8 callable (block model {}): its accumulation takes scales, so it has no "
             "unscaled fp8_accumulate; `run` it on a block-scaled layer (`boundary` measures it at unit scales that way)",
             info_.label, info_.accumulation_model);
    QC_INPUT(info_.unscaled_entry,
             "arm `{}` is an FP8 kernel fn(a_q, a_scale, w_q, w_scale, bias) -> y without an unscaled entry; pass "
             "accumulate=fn(a, w) -> d to qconform.arm to offer its fp32 GEMM",
             info_.label);
    const std::string context = fmt::format("FP8 GEMM {}x{}x{}", m, n, k);
    std::vector<float> d = guarded(context, context, [&] {
      const size_t mm = static_cast<size_t>(m), nn = static_cast<size_t>(n), kk = static_cast<size_t>(k);
      // Copies: the callable may keep its arguments; the caller's buffers are only borrowed.
      nb::object av = numpy_from_vector(std::vector<uint8_t>(a, a + m * k), {mm, kk});
      nb::object wv = numpy_from_vector(std::vector<uint8_t>(w, w + n * k), {nn, kk});
      return call_fp8(av, wv, m, n, fmt::format("arm `{}` on an FP8 GEMM {}x{}x{}", info_.label, m, n, k));
    });
    record = {{"arm", info_.label}, {"kernel", record_.kernel}};
    if (!info_.accumulation_model.empty()) {
      record["accumulation_model"] = info_.accumulation_model;
      record["accumulation_formula"] = qc::declared_model_formula(info_.accumulation_model);
      record["accumulation_model_declared_by"] = "the Python callable (its declaration, not a measurement)";
    }
    return d;
  }

 private:
  // Runs `f` with the GIL; turns a `qconform.InputError` raised by the callable into the C++ input
  // error, and parks any other Python exception with a note naming the arm and `what`.
  template <class F>
  auto guarded(const std::string& refused_what, const std::string& what, F&& f) -> decltype(f()) {
    nb::gil_scoped_acquire gil;
    try {
      return f();
    } catch (nb::python_error& e) {
      // A callable refuses operands it cannot take (a bias, a shape) as the built-in arms do, by
      // raising `qconform.InputError`: that becomes the C++ input error the checks expect (identify
      // reads a refused bias as "this kernel takes no bias").
      if (PyErr_GivenExceptionMatches(e.type().ptr(), g_input_error)) {
        const std::string message = nb::str(e.value()).c_str();
        throw qc::Error(qc::ErrorKind::input, fmt::format("arm `{}` refuses {}: {}", info_.label, refused_what, message),
                        __FILE__, __LINE__, "qconform.InputError raised by the callable");
      }
      // Park the exception (see `reraise_pending`), with a note naming the arm and the layer.
      nb::object value = nb::borrow(e.value());
      if (nb::hasattr(value, "add_note")) {
        value.attr("add_note")(fmt::format("raised by the Python callable of qconform arm `{}` on {}", info_.label, what));
      }
      Py_XDECREF(g_pending_exception);
      g_pending_exception = value.release().ptr();
      throw PendingPythonError{};
    }
  }

  // d = fn(a, w) (or accumulate(a, w)) checked: float32 [m, n].
  std::vector<float> call_fp8(nb::handle a, nb::handle w, int64_t m, int64_t n, const std::string& who) {
    nb::object result = kind_ == PyArmKind::fp8_kernel ? accumulate_(a, w) : fn_(a, w);
    const std::string what = who + ": output d (the unscaled fp32 GEMM)";
    const HostArray<float> d = host_array<float>(as_array(normalize_(result), what), what, Elem::f32, {2});
    QC_INPUT(d.dim(0) == m && d.dim(1) == n, "{}: expected shape [{},{}] (M,N), found {}", what, m, n, shape_text(d.array));
    return std::vector<float>(d.data.begin(), d.data.end());
  }

  // The e4m3 codes an FP8 callable receives for a layer: an FP8 layer's own, or an INT8 layer's codes
  // re-encoded exactly (`fp8_layer_codes`).
  qc::Fp8LayerCodes e4m3_codes(const qc::LayerOperands& ops) const {
    ops.validate();
    qc::Fp8LayerCodes codes = qc::fp8_layer_codes(info_.label, ops);
    QC_INPUT(codes.a_format == qc::Fp8Format::e4m3 && codes.w_format == qc::Fp8Format::e4m3,
             "arm `{}`: layer `{}`: e5m2 operands: a Python FP8 callable receives e4m3 codes only", info_.label, ops.name);
    return codes;
  }

  // An FP8 GEMM callable on a layer: its codes, d = fn(a, w), then the FP8 epilogue.
  qc::ArmOutput run_fp8_with_gil(const qc::LayerOperands& ops) {
    QC_INPUT(!ops.has_bias(), "arm `{}`: layer `{}`: an FP8 GEMM callable fn(a, w) -> d takes no bias (qconform's "
             "`fp8-scaled` epilogue adds none)", info_.label, ops.name);
    const qc::Fp8LayerCodes codes = e4m3_codes(ops);
    const size_t m = static_cast<size_t>(ops.m), n = static_cast<size_t>(ops.n), k = static_cast<size_t>(ops.k);
    nb::object av = numpy_from_vector(std::vector<uint8_t>(codes.a.begin(), codes.a.end()), {m, k});
    nb::object wv = numpy_from_vector(std::vector<uint8_t>(codes.w.begin(), codes.w.end()), {n, k});
    const std::vector<float> d = call_fp8(av, wv, ops.m, ops.n, fmt::format("arm `{}` on layer `{}`", info_.label, ops.name));
    qc::ArmOutput out;
    out.y.resize(d.size());
    qc::apply_epilogue(qc::fp8_epilogue(), d.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, ops.m, ops.n,
                       out.y.data());
    out.record = record_;
    out.record.arm = info_.label;
    if (!info_.accumulation_model.empty()) {
      out.record.extra["accumulation_model"] = info_.accumulation_model;
      out.record.extra["accumulation_model_declared_by"] = "the Python callable (its declaration, not a measurement)";
    }
    out.record.extra["operands"] = codes.description;
    return out;
  }

  // A block-scaled FP8 callable on a block-scaled layer: d = fn(a, w, a_scale, w_scale, block_size) with
  // the e4m3 codes (uint8), the scales in their layouts (a_scale [M, ceil(K/g)] or [M]; w_scale
  // [ceil(N/b_n), ceil(K/b_k)] or [N]) and block_size = [b_n, b_k] (vLLM's `w8a8_block_fp8_matmul`
  // order); d float32 [M, N] is the kernel's fp32 D, rounded here to bf16 (RNE) and exposed as `ArmOutput::d`.
  qc::ArmOutput run_block_with_gil(const qc::LayerOperands& ops) {
    QC_INPUT(!ops.has_bias(), "arm `{}`: layer `{}`: the FP8 arms take no bias (not modelled)", info_.label, ops.name);
    const qc::Fp8LayerCodes codes = e4m3_codes(ops);
    struct {
      nb::object a, w;
    } in{numpy_from_vector(std::vector<uint8_t>(codes.a.begin(), codes.a.end()),
                           {static_cast<size_t>(ops.m), static_cast<size_t>(ops.k)}),
         numpy_from_vector(std::vector<uint8_t>(codes.w.begin(), codes.w.end()),
                           {static_cast<size_t>(ops.n), static_cast<size_t>(ops.k)})};
    nb::object sa = numpy_from_vector(std::vector<float>(ops.a_scale.begin(), ops.a_scale.end()),
                                      scale_dims(ops.a_scaling, ops.m, ops.k));
    nb::object sw = numpy_from_vector(std::vector<float>(ops.w_scale.begin(), ops.w_scale.end()),
                                      scale_dims(ops.w_scaling, ops.n, ops.k));
    const int64_t block_n = ops.w_scaling.granularity == qc::ScaleGranularity::per_block ? ops.w_scaling.block_rows : 1;
    nb::list block_size;
    block_size.append(block_n);
    block_size.append(ops.scale_block_k());
    const std::string who = fmt::format("arm `{}` on layer `{}`", info_.label, ops.name);
    nb::object result = fn_(in.a, in.w, sa, sw, block_size);
    const std::string what = who + ": output d (the block-scaled fp32 D)";
    const HostArray<float> d = host_array<float>(as_array(normalize_(result), what), what, Elem::f32, {2});
    QC_INPUT(d.dim(0) == ops.m && d.dim(1) == ops.n, "{}: expected shape [{},{}] (M,N), found {}", what, ops.m, ops.n,
             shape_text(d.array));
    qc::ArmOutput out;
    out.d = std::vector<float>(d.data.begin(), d.data.end());
    out.y.resize(out.d->size());
    for (size_t i = 0; i < out.y.size(); ++i) out.y[i] = qc::f32_to_bf16((*out.d)[i]);
    out.record = record_;
    out.record.arm = info_.label;
    out.record.extra["accumulation_model"] = info_.accumulation_model;
    out.record.extra["accumulation_model_declared_by"] = "the Python callable (its declaration, not a measurement)";
    out.record.extra["operands"] = codes.description;
    out.record.extra["scales"] = ops.scaling_description();
    return out;
  }

 public:
  nb::callable callable() const { return fn_; }

 private:
  // The INT8 signature fn(a_q, a_scale, w_q, w_scale, bias): int8 codes for an INT8 kernel, the
  // layer's e4m3 codes (uint8 bit patterns) for an FP8 kernel.
  qc::ArmOutput run_with_gil(const qc::LayerOperands& ops) {
    const size_t m = static_cast<size_t>(ops.m), n = static_cast<size_t>(ops.n), k = static_cast<size_t>(ops.k);
    std::optional<qc::Fp8LayerCodes> codes;
    nb::object a_q, w_q;
    if (kind_ == PyArmKind::fp8_kernel) {
      codes.emplace(e4m3_codes(ops));
      a_q = numpy_from_vector(std::vector<uint8_t>(codes->a.begin(), codes->a.end()), {m, k});
      w_q = numpy_from_vector(std::vector<uint8_t>(codes->w.begin(), codes->w.end()), {n, k});
    } else {
      a_q = numpy_view(ops.a_q, {m, k}, ops.keepalive);
      w_q = numpy_view(ops.w_q, {n, k}, ops.keepalive);
    }
    // Scales in their layouts: [M] / [N], or a block-scaled layer's [M, ceil(K/g)] / [ceil(N/b_n), ceil(K/b_k)].
    nb::object a_scale = numpy_view(ops.a_scale, scale_dims(ops.a_scaling, ops.m, ops.k), ops.keepalive);
    nb::object w_scale = numpy_view(ops.w_scale, scale_dims(ops.w_scaling, ops.n, ops.k), ops.keepalive);
    nb::object bias = ops.has_bias() ? numpy_view(ops.bias, {n}, ops.keepalive) : nb::none();
    nb::object result = fn_(a_q, a_scale, w_q, w_scale, bias);

    const std::string who = fmt::format("arm `{}` on layer `{}`", info_.label, ops.name);
    nb::object y_obj = result, acc_obj;
    if (info_.exposes_accumulator) {
      nb::tuple t;
      QC_INPUT(nb::try_cast(result, t, false) && nb::len(t) == 2,
               "{}: the callable declares exposes_accumulator=True, so it must return a tuple (y, acc); found {}", who,
               type_qualname(result));
      y_obj = t[0];
      acc_obj = t[1];
    }
    qc::ArmOutput out;
    {
      const std::string what = who + ": output y";
      const HostArray<uint16_t> y =
          host_array<uint16_t>(as_array(normalize_(y_obj), what), what, Elem::bf16, {2});
      QC_INPUT(y.dim(0) == ops.m && y.dim(1) == ops.n, "{}: expected shape [{},{}] (M,N), found {}", what, ops.m, ops.n,
               shape_text(y.array));
      out.y.assign(y.data.begin(), y.data.end());
    }
    if (acc_obj.is_valid()) {
      const std::string what = who + ": output acc";
      const HostArray<int32_t> acc =
          host_array<int32_t>(as_array(normalize_(acc_obj), what), what, Elem::i32, {2});
      QC_INPUT(acc.dim(0) == ops.m && acc.dim(1) == ops.n, "{}: expected shape [{},{}] (M,N), found {}", what, ops.m,
               ops.n, shape_text(acc.array));
      out.acc = std::vector<int32_t>(acc.data.begin(), acc.data.end());
    }
    out.record = record_;
    out.record.arm = info_.label;
    out.record.epilogue = info_.epilogue;
    if (codes) {
      out.record.extra["operands"] = codes->description;
      if (!info_.accumulation_model.empty()) {
        out.record.extra["accumulation_model"] = info_.accumulation_model;
        out.record.extra["accumulation_model_declared_by"] = "the Python callable (its declaration, not a measurement)";
      }
    }
    return out;
  }

  nb::callable fn_;
  nb::object accumulate_;  // an FP8 kernel's unscaled entry, or None
  nb::callable normalize_;
  qc::ArmInfo info_;
  qc::RunRecord record_;
  PyArmKind kind_;
};

}  // namespace

// Arms: the C++ ones, Python callables, plugins.
void bind_arms(nb::module_& m) {
  // ---- arms ----
  nb::class_<qc::Arm>(m, "Arm", "One implementation of the scaled-INT8 linear layer (C++ or a Python callable).")
      .def_prop_ro("info", [](const qc::Arm& a) { return info_to_dict(a.info()); })
      .def_prop_ro("label", [](const qc::Arm& a) { return a.info().label; })
      .def(
          "run",
          [](qc::Arm& a, nb::handle layer) {
            const qc::LayerOperands ops = operands_from_dict(layer, "layer");
            qc::ArmOutput out = without_gil([&] { return a.run(ops); });
            QC_INPUT(static_cast<int64_t>(out.y.size()) == ops.m * ops.n, "arm {} returned {} outputs, expected {}x{}",
                     a.info().label, out.y.size(), ops.m, ops.n);
            nb::dict d;
            const std::vector<size_t> shape{static_cast<size_t>(ops.m), static_cast<size_t>(ops.n)};
            d["y"] = numpy_from_vector(std::move(out.y), shape);
            d["acc"] = out.acc ? numpy_from_vector(std::move(*out.acc), shape) : nb::none();
            // Block-scaled FP8 arms: the fp32 accumulator D that `y` was rounded from (None when not exposed).
            d["d"] = out.d ? numpy_from_vector(std::move(*out.d), shape) : nb::none();
            d["record"] = record_to_py(out.record);
            return d;
          },
          "layer"_a)
      .def(
          "fp8_accumulate",
          [](qc::Arm& arm, nb::handle a_obj, nb::handle w_obj, int threads) {
            const HostArray<uint8_t> a = host_array<uint8_t>(as_array(a_obj, "a"), "a", Elem::u8, {2});
            const HostArray<uint8_t> w = host_array<uint8_t>(as_array(w_obj, "w"), "w", Elem::u8, {2});
            QC_INPUT(a.dim(1) == w.dim(1), "w: expected [N,K] with K = {} (the columns of a), found {}", a.dim(1),
                     shape_text(w.array));
            QC_INPUT(threads >= 0, "threads: expected 0 (all cores) or a positive count, found {}", threads);
            const int64_t M = a.dim(0), N = w.dim(0), K = a.dim(1);
            // The FP8 models take finite codes only: refuse a NaN code here, naming it, for every arm.
            qc::validate_fp8_gemm(qc::Fp8AccumModel{}, qc::Fp8Gemm{a.data.data(), qc::Fp8Format::e4m3, w.data.data(),
                                                                     qc::Fp8Format::e4m3, {M, N, K}});
            nlohmann::json record;
            std::vector<float> d = without_gil([&] { return arm.fp8_accumulate(a.data.data(), w.data.data(), M, N, K, record, threads); });
            QC_INPUT(static_cast<int64_t>(d.size()) == M * N, "arm {} returned {} outputs, expected {}x{}", arm.info().label,
                     d.size(), M, N);
            nb::dict out;
            out["d"] = numpy_from_vector(std::move(d), {static_cast<size_t>(M), static_cast<size_t>(N)});
            out["record"] = json_to_py(record);
            return out;
          },
          "a"_a, "w"_a, "threads"_a = 0)
      .def("__repr__", [](const qc::Arm& a) { return fmt::format("<qconform.Arm {}>", a.info().label); });

  nb::class_<PythonArm, qc::Arm>(m, "PythonArm", "An arm whose kernel is a Python callable.")
      .def_prop_ro("callable", &PythonArm::callable);

  m.def("make_arm", [](const std::string& label) { return qc::make_arm(label); }, "label"_a);
  m.def("list_arms", [] { return qc::list_arms(); });
  m.def(
      "python_arm",
      [](nb::callable fn, nb::callable normalize, const std::string& label, const std::string& kernel,
         const std::string& epilogue, bool exposes_accumulator, const std::string& description,
         const std::string& device, const std::string& library, const std::string& build,
         const std::string& accumulation_model, const std::string& kind, nb::object accumulate, int64_t block_n, int64_t block_k) {
        qc::ArmInfo info;
        info.label = label;
        info.accumulation_model = accumulation_model;
        QC_INPUT(block_n >= 0 && block_k >= 0, "block_size: expected non-negative (rows, cols), found ({}, {})", block_n,
                 block_k);
        // A block size marks a block-scaled callable: one that declares a block model (fn(a, w, a_scale, w_scale,
        // block_size) -> d), or an FP8 kernel with the INT8 signature that declares none (its blocks, chain and
        // promotion form measured by identify).
        const bool block_kernel = kind == "fp8-kernel" && block_n > 0 && block_k > 0;
        const bool undeclared_block = block_kernel && accumulation_model.empty();
        QC_INPUT((block_n == 0 && block_k == 0) || qc::is_block_model_name(accumulation_model) || undeclared_block,
                 "block_size: only a block-scaled FP8 callable takes one: accumulation_model=\"block-...\" (fn(a, w, "
                 "a_scale, w_scale, block_size) -> d), or element=\"e4m3\" with a kernel fn(a_q, a_scale, w_q, "
                 "w_scale, bias) -> y that declares no model");
        info.block_n = block_n;
        info.block_k = block_k;
        info.block_scaled = undeclared_block;
        info.description = description;
        info.epilogue = epilogue;
        info.exposes_accumulator = exposes_accumulator;
        qc::RunRecord record;
        record.arm = label;
        record.kernel = kernel;
        record.epilogue = epilogue;
        record.device = device;
        record.library = library;
        record.build = build;
        return std::make_unique<PythonArm>(std::move(fn), std::move(accumulate), std::move(normalize), std::move(info),
                                           std::move(record), py_arm_kind(kind));
      },
      "fn"_a, "normalize"_a, "label"_a, "kernel"_a, "epilogue"_a, "exposes_accumulator"_a, "description"_a,
      "device"_a, "library"_a, "build"_a, "accumulation_model"_a = "", "kind"_a = "int8", "accumulate"_a = nb::none(), "block_n"_a = 0, "block_k"_a = 0);
}

}  // namespace qc::py
