// C3, shared operands: both arms received byte-identical quantized activations, scales and
// weights. verify takes a private copy of everything the arms receive before arm A runs
// (`OperandSnapshot`) and compares the operands with it after each arm, byte for byte.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "checks/verify.hpp"
#include "qconform/check.hpp"
#include "qconform/operands.hpp"

namespace qc {

// A private copy of what the arms receive. After each arm the operands are compared with it byte for
// byte (1 MiB chunks on every core), and the first changed element is named with its coordinates,
// old and new value.
class OperandSnapshot {
 public:
  // `with_weights`: also the weights (verify checks them in the first run of each layer; the
  // runs of other row counts and scale regimes share the same weight bytes).
  OperandSnapshot(const LayerOperands& ops, bool with_weights, int threads);

  // "" when every operand byte is unchanged, else "w_q[12,345]: 5 (0x05) became 7 (0x07)".
  std::string first_change(const LayerOperands& ops) const;
  // The same words for a change found elsewhere (verify's device pipeline compares device copies):
  // element `element` of piece `piece` (in the order a_q, a_scale, w_scale, bias, w_q) of `ops`, whose
  // bytes were `was` and are `now`.
  static std::string describe_change(const LayerOperands& ops, int piece, size_t element, const std::byte* was,
                                     const std::byte* now);

 private:
  enum class Kind { i8, f32, bf16 };
  struct Piece {
    const char* name;
    std::span<const std::byte> bytes;
    Kind kind;
    size_t element_size;
    int64_t cols;  // for coordinates; 0 for vectors
  };
  static std::vector<Piece> pieces(const LayerOperands& ops, bool with_weights);
  static std::string describe(const Piece& p, size_t element, const std::byte* was, const std::byte* now);

  bool with_weights_;
  int threads_;
  std::vector<std::vector<std::byte>> copies_;
};

// C3 over every run: each run's `operands_identical` (and `operands_note` naming the first change).
CheckResult c3_shared_operands(const std::vector<LayerRun>& runs);

}  // namespace qc
