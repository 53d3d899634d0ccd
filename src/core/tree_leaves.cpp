#include "core/tree_leaves.hpp"

#include <cstring>
#include <map>
#include <mutex>

#include "qconform/error.hpp"

namespace qc {

TreeLeaves::TreeLeaves(uint64_t file_size)
    : size_(file_size),
      count_(std::max<uint64_t>(1, (file_size + kTreeDigestLeaf - 1) / kTreeDigestLeaf)),
      digests_(static_cast<size_t>(count_) * 32),
      have_(std::make_unique<std::atomic<bool>[]>(static_cast<size_t>(count_))) {}

void TreeLeaves::put(uint64_t first, uint64_t n, const unsigned char* digests) {
  QC_CHECK(first <= count_ && n <= count_ - first, "TreeLeaves::put: leaves [{}, {}) of a file of {}", first, first + n,
           count_);
  std::memcpy(digests_.data() + first * 32, digests, static_cast<size_t>(n) * 32);
  uint64_t fresh = 0;
  for (uint64_t i = first; i < first + n; ++i) fresh += have_[i].exchange(true, std::memory_order_release) ? 0 : 1;
  given_count_.fetch_add(fresh, std::memory_order_relaxed);
}

const unsigned char* TreeLeaves::given(uint64_t i) const {
  return i < count_ && have_[i].load(std::memory_order_acquire) ? digests_.data() + i * 32 : nullptr;
}

namespace {

struct Registered {
  uintptr_t end = 0;
  std::shared_ptr<TreeLeaves> leaves;
};

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Registered> by_base;
};

Registry& registry() {
  static Registry r;
  return r;
}

// Removes its range from the registry when dropped, then lets the mapping go (`keep`, released after).
struct Registration {
  uintptr_t base = 0;
  std::shared_ptr<const void> keep;
  ~Registration() {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.by_base.erase(base);
  }
};

}  // namespace

std::shared_ptr<const void> register_mapped_leaves(const void* base, uint64_t bytes, std::shared_ptr<TreeLeaves> leaves,
                                                   std::shared_ptr<const void> keep) {
  QC_CHECK(leaves != nullptr && bytes == leaves->file_size(), "register_mapped_leaves: {} bytes mapped of a file of {}",
           bytes, leaves ? leaves->file_size() : 0);
  const auto at = reinterpret_cast<uintptr_t>(base);
  auto handle = std::make_shared<Registration>();
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    const bool fresh = r.by_base.emplace(at, Registered{at + bytes, std::move(leaves)}).second;
    QC_CHECK(fresh, "register_mapped_leaves: the mapping at {} is registered twice", base);
  }
  handle->base = at;
  handle->keep = std::move(keep);
  return handle;
}

std::optional<MappedLeaves> find_mapped_leaves(const void* p, uint64_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_base.upper_bound(at);
  if (it == r.by_base.begin()) return std::nullopt;
  --it;
  if (at + bytes > it->second.end || at + bytes < at) return std::nullopt;
  return MappedLeaves{it->second.leaves, at - it->first};
}

WholeLeaves whole_leaves(uint64_t offset, uint64_t bytes) {
  const uint64_t first = (offset + kTreeDigestLeaf - 1) / kTreeDigestLeaf;
  const uint64_t end = (offset + bytes) / kTreeDigestLeaf;
  if (end <= first) return {first, 0, 0};
  return {first, end - first, first * kTreeDigestLeaf - offset};
}

}  // namespace qc
