// The epilogue formulas (`epilogues`) and the comparison of two bf16 outputs (`compare`).
#include "ext_common.hpp"

#include "qconform/compare.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"

using namespace nb::literals;

namespace qc::py {

// The epilogue formulas.
void bind_epilogues(nb::module_& m) {
  m.def("epilogues", [] {
    nb::list out;
    for (const qc::Epilogue& e : qc::all_epilogues()) {
      nb::dict d;
      d["name"] = std::string(e.name);
      d["formula"] = std::string(e.formula);
      d["source"] = std::string(e.source);
      d["accepts_bias"] = e.accepts_bias();
      d["bias_after_rounding"] = e.bias_after_rounding();
      out.append(d);
    }
    return out;
  });

  m.def(
      "compare",
      [](AnyArray a_arr, AnyArray b_arr, const std::string& layer, double near_zero_fraction, size_t max_listed) {
        const HostArray<uint16_t> a = host_array<uint16_t>(a_arr, "a", Elem::bf16, {1, 2});
        const HostArray<uint16_t> b = host_array<uint16_t>(b_arr, "b", Elem::bf16, {1, 2});
        QC_INPUT(a.shape == b.shape, "b: expected the shape of a {}, found {}", shape_text(a.array), shape_text(b.array));
        const int64_t rows = a.shape.size() == 2 ? a.dim(0) : 1;
        const int64_t cols = a.shape.size() == 2 ? a.dim(1) : a.dim(0);
        qc::CompareOptions o;
        o.near_zero_fraction = near_zero_fraction;
        o.max_listed = max_listed;
        nlohmann::json j;
        without_gil([&] { qc::to_json(j, qc::compare_bf16(a.data, b.data, rows, cols, layer, o)); });
        return json_to_py(j);
      },
      "a"_a, "b"_a, "layer"_a = "", "near_zero_fraction"_a = 1e-2, "max_listed"_a = 10);
}

}  // namespace qc::py
