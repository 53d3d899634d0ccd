// The process world of a run: one process, or the ranks of an MPI job (`mpirun -n R qconform
// verify ...`). Work is split over ranks by item (layers, prompts), balanced by its cost; every
// rank sends its per-item results (JSON) to rank 0, which merges them in item order, so a merged
// result does not depend on the rank count. This header is the only way the rest of qconform
// sees MPI: src/dist/world_mpi.cpp implements it on MPI, src/dist/world_single.cpp (builds
// without MPI) as a world of one process.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace qc::dist {

struct World {
  int rank = 0, size = 1;              // in MPI_COMM_WORLD
  int local_rank = 0, local_size = 1;  // among the ranks on this host (MPI_COMM_TYPE_SHARED)
  bool root() const { return rank == 0; }
};

// Starts MPI when this build has it and an MPI launcher started the process (its environment says
// so: OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, ...); otherwise the world is this one process and
// nothing of MPI is touched. Ranks sharing a host split its cores (qc::set_thread_share). A build
// without MPI started as one of several ranks is an input error (each would run the whole job).
void init(int* argc, char*** argv);
// MPI_Finalize when init started MPI.
void finalize();
// Ends every rank of the job at once with `code` (MPI_Abort), after an error that other ranks
// cannot learn of in a collective; a plain exit in a world of one.
[[noreturn]] void abort_job(int code);
const World& world();
// "Open MPI v4.1.4, 2 ranks" or "none (built without MPI)", for manifests and `--version`-like output.
std::string description();
bool built_with_mpi();

// Rank 0 receives every rank's bytes in rank order (its own first); other ranks receive nothing.
std::vector<std::string> gather(const std::string& mine);
// Every rank receives rank 0's `text`.
std::string broadcast(const std::string& text);

// ---- work sharing (share.cpp) -------------------------------------------------------------------

// The owner rank of each item: items taken by descending cost (lower index first among equals),
// each to the rank with the least cost so far (lower rank first among equals) — the greedy
// longest-processing-time rule, deterministic, within 4/3 of the best balance.
//
// `group` (optional, one id per item): items of one group (the layers of one shard file) go to
// one rank together — the same rule over the groups — when that leaves the most loaded rank at
// most kGroupSlack times the load of the item-by-item assignment; otherwise items are assigned one
// by one (and a group may be read by several ranks). Reading a shard costs every rank that maps it
// a hash of the whole shard, so keeping a shard on one rank saves that work when the balance
// allows it.
inline constexpr double kGroupSlack = 1.10;
std::vector<int> assign_by_work(const std::vector<double>& cost, int ranks, const std::vector<int64_t>& group = {});
// The items `rank` owns, ascending.
std::vector<size_t> owned_by(const std::vector<int>& owner, int rank);

// What one rank computed over its items, or why it stopped.
struct Outcome {
  std::map<size_t, nlohmann::json> results;  // item index -> its result
  nlohmann::json rank_info;                  // anything else rank 0 should see (timings), per rank
  bool failed = false;
  std::string item;                          // the item in progress when it failed ("" if none)
  std::string reason;
  bool input_error = true;                   // qc::ErrorKind::input (exit 2) or internal (exit 3)
};

// Runs `work` over the items this rank owns, catching the first error into the outcome (with the
// item `name_of` names), then gathers every rank's outcome at rank 0: there the merged results,
// by item index; elsewhere an empty map. When any rank failed, every rank throws JobFailed (rank 0's
// names the rank, the item and the reason), so that nothing is merged or written anywhere. In a
// world of one, the error itself propagates.
using ItemWork = std::function<void(const std::vector<size_t>& items, Outcome& out, std::string& in_progress)>;
struct Shared {
  std::map<size_t, nlohmann::json> results;  // rank 0: every rank's results by item; elsewhere empty
  std::vector<nlohmann::json> rank_info;     // rank 0: each rank's `rank_info`, in rank order
};
// `items`: the item indices to share out; `cost[i]`: the work of items[i]; `group[i]` (optional):
// the group of items[i], kept on one rank when the balance allows (assign_by_work).
Shared run_shared(const std::vector<size_t>& items, const std::vector<double>& cost, const ItemWork& work,
                  const std::vector<int64_t>& group = {});

// The job failed and every rank knows it: rank 0 prints `message` (the failing rank, item and
// reason), the other ranks nothing; each exits with `code` (2: input, 3: internal).
class JobFailed : public std::runtime_error {
 public:
  JobFailed(int code, std::string message)
      : std::runtime_error(message.empty() ? "another rank failed" : message), code_(code), message_(std::move(message)) {}
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  int code_;
  std::string message_;
};

}  // namespace qc::dist
