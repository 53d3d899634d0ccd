// C3, shared operands (c3_shared_operands.hpp).
#include "checks/c3_shared_operands.hpp"
#include "checks/layer_checks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/parallel.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

OperandSnapshot::OperandSnapshot(const LayerOperands& ops, bool with_weights, int threads)
    : with_weights_(with_weights), threads_(threads) {
  for (const Piece& p : pieces(ops, with_weights_)) copies_.emplace_back(p.bytes.begin(), p.bytes.end());
}

std::string OperandSnapshot::first_change(const LayerOperands& ops) const {
  const std::vector<Piece> now = pieces(ops, with_weights_);
  for (size_t p = 0; p < now.size(); ++p) {
    const std::vector<std::byte>& was = copies_[p];
    if (now[p].bytes.size() != was.size()) {
      return fmt::format("{}: {} bytes became {}", now[p].name, was.size(), now[p].bytes.size());
    }
    constexpr size_t kChunk = size_t{1} << 20;
    const int64_t chunks = static_cast<int64_t>((was.size() + kChunk - 1) / kChunk);
    std::vector<char> differs(static_cast<size_t>(chunks), 0);
    parallel_for(chunks, was.size() < 4 * kChunk ? 1 : threads_, [&](int64_t c) {
      const size_t at = static_cast<size_t>(c) * kChunk, len = std::min(kChunk, was.size() - at);
      differs[static_cast<size_t>(c)] = std::memcmp(now[p].bytes.data() + at, was.data() + at, len) != 0;
    });
    const auto hit = std::find(differs.begin(), differs.end(), 1);
    if (hit == differs.end()) continue;
    size_t byte = static_cast<size_t>(hit - differs.begin()) * kChunk;
    while (now[p].bytes[byte] == was[byte]) ++byte;
    const size_t element = byte / now[p].element_size, at = element * now[p].element_size;
    return describe(now[p], element, was.data() + at, now[p].bytes.data() + at);
  }
  return "";
}

std::vector<OperandSnapshot::Piece> OperandSnapshot::pieces(const LayerOperands& ops, bool with_weights) {
  std::vector<Piece> p = {{"a_q", std::as_bytes(ops.a_q), Kind::i8, 1, ops.k},
                          {"a_scale", std::as_bytes(ops.a_scale), Kind::f32, 4, 0},
                          {"w_scale", std::as_bytes(ops.w_scale), Kind::f32, 4, 0},
                          {"bias", std::as_bytes(ops.bias), Kind::bf16, 2, 0}};
  if (with_weights) p.push_back({"w_q", std::as_bytes(ops.w_q), Kind::i8, 1, ops.k});
  return p;
}

std::string OperandSnapshot::describe_change(const LayerOperands& ops, int piece, size_t element, const std::byte* was,
                                             const std::byte* now) {
  const std::vector<Piece> p = pieces(ops, /*with_weights=*/true);
  QC_CHECK(piece >= 0 && static_cast<size_t>(piece) < p.size(), "C3: operand piece {} of {}", piece, p.size());
  return describe(p[static_cast<size_t>(piece)], element, was, now);
}

std::string OperandSnapshot::describe(const Piece& p, size_t element, const std::byte* was, const std::byte* now) {
  const auto value = [&](const std::byte* at) {
    switch (p.kind) {
      case Kind::i8: return fmt::format("{} (0x{:02x})", static_cast<int8_t>(*at), static_cast<uint8_t>(*at));
      case Kind::f32: {
        uint32_t bits = 0;
        std::memcpy(&bits, at, 4);
        return fmt::format("{:.9g} (0x{:08x})", std::bit_cast<float>(bits), bits);
      }
      case Kind::bf16: {
        uint16_t bits = 0;
        std::memcpy(&bits, at, 2);
        return fmt::format("{:.9g} (0x{:04x})", bf16_to_f32(bits), bits);
      }
    }
    return std::string("?");
  };
  const std::string where = p.cols > 0 ? fmt::format("{}[{},{}]", p.name, static_cast<int64_t>(element) / p.cols,
                                                     static_cast<int64_t>(element) % p.cols)
                                       : fmt::format("{}[{}]", p.name, element);
  return fmt::format("{}: {} became {}", where, value(was), value(now));
}

CheckResult c3_shared_operands(const std::vector<LayerRun>& runs) {
  CheckResult c3 = make_check("C3", Verdict::pass);
  int64_t c3_bad = 0;
  std::vector<std::string> c3_first;
  for (const LayerRun& r : runs) {
    if (!r.operands_identical) {
      ++c3_bad;
      if (c3_first.size() < 5) c3_first.push_back(fmt::format("{} m={} {}: {}", r.layer, r.m, scale_mode_name(r.mode), r.operands_note));
    }
  }
  if (c3_bad) c3.verdict = Verdict::fail;
  c3.summary = fmt::format("both arms received byte-identical operands (compared byte for byte with a copy taken "
                           "before the arms ran) in {}/{} runs",
                           runs.size() - c3_bad, runs.size());
  c3.evidence = {{"runs", runs.size()}, {"modified", c3_bad}, {"first", c3_first}};
  return c3;
}

// C3's run evidence: whether the operands were unchanged and equal for both arms, and the first change.
const LayerCheck kC3SharedOperands = {
    .id = "C3",
    .decide = [](const LayerCheckInputs& in) { return c3_shared_operands(in.runs); },
    .write_run =
        [](nlohmann::json& j, const LayerRun& x, bool lossless) {
          j["operands_identical"] = x.operands_identical;
          if (lossless) j["operands_note"] = x.operands_note;
        },
    .read_run =
        [](const nlohmann::json& j, LayerRun& x) {
          x.operands_identical = j.at("operands_identical").get<bool>();
          x.operands_note = j.at("operands_note").get<std::string>();
        },
    // The operands precede every other stage: an arm that did not get identical bytes is named first.
    .evidence_stage = [](const VerifyResult& r) -> std::optional<StageFinding> {
      for (const LayerRun& x : r.runs) {
        if (x.operands_identical) continue;
        return StageFinding{Stage::operands,
                            fmt::format("C3: the arms did not receive identical operands ({} m={} {}): {}", x.layer,
                                        x.m, scale_mode_name(x.mode), x.operands_note)};
      }
      return std::nullopt;
    },
};

}  // namespace qc
