// Leaves of a file's tree digest (docs/formats.md, "Tree digest") computed by someone other than the tree's
// own readers: verify's device pipeline hashes the operand arrays it uploads, on the device, and gives their
// leaves here; the tree digest then reads only the leaves nobody gave (`sha256_tree_file`).
//
// The pipeline knows the arrays as views into mapped files, not as files: `register_mapped_leaves` names a
// mapping's bytes as a file's, and `find_mapped_leaves` finds, for a view into it, the file's leaves and the
// view's offset in the file.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace qc {

// The tree's leaf: the file is hashed in 4 KiB pieces, small enough that a device hashes a layer's arrays
// one thread per leaf (a 67 MB weight is 16,384 of them).
inline constexpr uint64_t kTreeDigestLeaf = 4096;

// The 32-byte SHA-256 digests of one file's leaves, those given so far.
class TreeLeaves {
 public:
  explicit TreeLeaves(uint64_t file_size);
  TreeLeaves(const TreeLeaves&) = delete;
  TreeLeaves& operator=(const TreeLeaves&) = delete;

  uint64_t file_size() const { return size_; }
  uint64_t count() const { return count_; }  // the file's leaves (an empty file has one, empty)
  // The digests of leaves [first, first + n), 32 bytes each in leaf order; from any thread. A leaf outside
  // the file is a program error.
  void put(uint64_t first, uint64_t n, const unsigned char* digests);
  // Leaf i's digest when it was given (32 bytes), else null.
  const unsigned char* given(uint64_t i) const;
  uint64_t given_count() const { return given_count_.load(std::memory_order_relaxed); }

 private:
  uint64_t size_ = 0, count_ = 0;
  std::vector<unsigned char> digests_;
  std::unique_ptr<std::atomic<bool>[]> have_;
  std::atomic<uint64_t> given_count_{0};
};

// While the returned handle lives, `find_mapped_leaves` takes [base, base + bytes) for the bytes of the file
// whose leaves `leaves` collects (the whole file, mapped from its first byte). `keep` (the mapping's owner)
// is held with it, so that the range cannot be unmapped, and mapped again for another file, while it is
// registered.
std::shared_ptr<const void> register_mapped_leaves(const void* base, uint64_t bytes, std::shared_ptr<TreeLeaves> leaves,
                                                   std::shared_ptr<const void> keep);

struct MappedLeaves {
  std::shared_ptr<TreeLeaves> leaves;
  uint64_t offset = 0;  // of the view's first byte in the file
};
// The registered file that holds all of [p, p + bytes), if any.
std::optional<MappedLeaves> find_mapped_leaves(const void* p, uint64_t bytes);

// The leaves that lie wholly inside the file bytes [offset, offset + bytes): [first, first + count).
struct WholeLeaves {
  uint64_t first = 0, count = 0;
  uint64_t skip = 0;  // bytes from `offset` to the first such leaf
};
WholeLeaves whole_leaves(uint64_t offset, uint64_t bytes);

}  // namespace qc
