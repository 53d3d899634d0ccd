// Operand files: safetensors (one file, or shards named by an index, docs/formats.md) with keys `<layer>.a_q` i8 [M,K], `<layer>.a_scale` f32 [M] (or
// [M,1]), `<layer>.w_q` i8 [N,K], `<layer>.w_scale` f32 [N] (or [N,1]), optional `<layer>.bias`
// bf16 [N]. `__metadata__` records the source; its key `layers` (comma-separated) fixes the layer
// order, otherwise layers are ordered naturally (numbers compared as numbers). Its keys `act_scale`,
// `weight_scale` and `scale_fmt` give every layer's scale layout (per-token-group a_scale [M, ceil(K/g)],
// per-block w_scale [ceil(N/b_n), ceil(K/b_k)], UE8M0 scales); without them, per token x per channel.
#pragma once

#include <functional>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/sha256.hpp"
#include "qconform/operands.hpp"

namespace qc {

struct LayerHeader {
  std::string name;
  int64_t m = 0, n = 0, k = 0;
  std::string shard;  // the shard file that holds the layer (a sharded set), else ""
};

struct OperandSet {
  std::string path;
  std::string sha256;  // "sha256:<hex>" of the whole file, or of a sharded set's index
  // A digest still being read on a thread of its own (`open_operands(path, true, /*digest_beside=*/true)`),
  // beside the work; `await_sha256` waits for it and stores it in `sha256`.
  std::shared_future<FileDigests> pending_sha256;
  // A single file's tree digest, when the digest record is on (docs/formats.md, "Digest record"), and
  // whether `sha256` is the record's (the file read once, at the tree's pace) rather than read now.
  std::string sha256_tree;
  bool sha256_from_record = false;
  // A sharded set opened with `digest_beside`: waits for the digests of the shards mapped so far and
  // compares each with the index (an input error naming the first that differs).
  std::function<void()> await_shards;
  void await_sha256();
  // Opened with `device_leaves`: a single file's tree leaves, which verify's device pipeline gives as it
  // uploads the arrays (null otherwise), and the registration of its mapping that lets it find them.
  std::shared_ptr<TreeLeaves> tree_leaves;
  std::shared_ptr<const void> tree_leaves_registration;
  std::map<std::string, std::string> metadata;
  std::vector<LayerOperands> layers;  // every layer, views into mapped files (empty when opened lazily)
  std::vector<LayerHeader> headers;   // every layer's name and shape, in order
  std::function<LayerOperands(size_t)> loader;  // open_operands on a sharded set: maps layer i's shard

  size_t size() const { return headers.size(); }
  // Layer i: a view of `layers`, or its shard mapped for it (unmapped when the result is dropped).
  LayerOperands load(size_t i) const;
};

// A path ending in `.json` is the index of a sharded set (docs/formats.md): every shard's header
// is validated against the index up front; each shard's digest is checked against the index the
// first time a layer of it is loaded. Otherwise one safetensors file.
//
// Strict: unknown keys, missing parts, wrong dtypes or ranks, shape mismatches between a_q and
// w_q, non-finite or non-positive scales are input errors naming the file, the key and what was
// expected. `with_digest = false` skips hashing the file (the index).
OperandSet load_operands(const std::string& path, bool with_digest = true);
// Whether `path` names a sharded set's index (it ends in `.json`) rather than one safetensors file.
bool is_index_path(const std::string& path);
// The same checks, but a sharded set's layers stay on disk until `load(i)` maps them, so that
// what is resident is bounded by the layers in use, whatever the set's size. A single file is
// mapped whole, as by load_operands.
// `digest_beside`: a single file's digest is left reading on its own thread (`pending_sha256`) when this
// returns, so that it costs no wall time beside the work that follows (verify); `sha256` is empty until
// `await_sha256`. For a sharded set, each shard's digest is read on a thread of its own from the moment a
// layer of it is first mapped (the shards in parallel, one per core at most), and compared with the index in
// `await_sha256`, which the caller must call before it trusts what the layers gave (verify: before anything
// is printed or written).
// `device_leaves` (with `digest_beside`): the arrays of every file mapped are registered for verify's device
// pipeline, which hashes the tree digest's leaves of what it uploads (core/tree_leaves.hpp); the digests
// are then read when awaited (`await_sha256`, `pending_sha256`), from those leaves and the rest of the file,
// instead of beside the work from the start.
OperandSet open_operands(const std::string& path, bool with_digest = true, bool digest_beside = false,
                         bool device_leaves = false);

// Writes atomically (temporary file, then rename).
void save_operands(const std::string& path, const std::vector<LayerOperands>& layers,
                   std::map<std::string, std::string> metadata);

// The bytes a layer takes in an operand file.
int64_t operand_bytes(const LayerOperands& ops);

// Writes a sharded operand set layer by layer: shards `<stem>-00001.safetensors`, ... of at most
// `shard_bytes` of tensor data (a larger layer gets a shard of its own) beside the index
// `<stem>.index.json`, which is written last, with every shard's digest.
class ShardedOperandWriter {
 public:
  ShardedOperandWriter(std::string index_path, std::map<std::string, std::string> metadata, int64_t shard_bytes);
  void add(LayerOperands layer);
  // Writes the last shard and the index; returns the index's path.
  std::string finish();
  size_t shard_count() const { return shards_.size(); }

 private:
  void flush();
  std::string index_path_, stem_;
  std::map<std::string, std::string> metadata_;
  int64_t shard_bytes_;
  std::vector<LayerOperands> pending_;
  int64_t pending_bytes_ = 0, total_bytes_ = 0;
  std::vector<std::pair<std::string, std::string>> shards_;  // name, digest
  std::map<std::string, std::string> weight_map_;
  std::string order_;
  bool finished_ = false;
  std::optional<LayerOperands> first_layer_;  // the first layer's name and scale layouts (no bytes held)
};

// Natural order: "layers.2.q" < "layers.10.q".
bool natural_less(const std::string& a, const std::string& b);

}  // namespace qc
