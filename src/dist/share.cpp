// Work sharing over the ranks of a job: the balanced assignment, and the gather of per-item
// results (or of the first error) at rank 0.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "dist/dist.hpp"
#include "core/limits.hpp"
#include "qconform/error.hpp"

namespace qc::dist {

namespace {

// The longest-processing-time rule over `cost`; `max_load` receives the most loaded rank's load.
std::vector<int> greedy(const std::vector<double>& cost, int ranks, double& max_load) {
  std::vector<size_t> order(cost.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<double> load(static_cast<size_t>(ranks), 0.0);
  std::vector<int> owner(cost.size(), 0);
  for (size_t item : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first (lowest rank) among equals
    owner[item] = static_cast<int>(least - load.begin());
    *least += cost[item];
  }
  max_load = load.empty() ? 0 : *std::max_element(load.begin(), load.end());
  return owner;
}

}  // namespace

std::vector<int> assign_by_work(const std::vector<double>& cost, int ranks, const std::vector<int64_t>& group) {
  QC_CHECK(ranks >= 1, "assign_by_work: expected at least one rank, got {}", ranks);
  QC_CHECK(group.empty() || group.size() == cost.size(), "assign_by_work: {} items but {} group ids", cost.size(),
           group.size());
  double item_max = 0;
  std::vector<int> by_item = greedy(cost, ranks, item_max);
  if (group.empty() || ranks == 1) return by_item;
  // The groups in order of first appearance, with their summed cost.
  std::map<int64_t, size_t> index_of;
  std::vector<double> group_cost;
  for (size_t i = 0; i < cost.size(); ++i) {
    const auto [it, fresh] = index_of.try_emplace(group[i], group_cost.size());
    if (fresh) group_cost.push_back(0);
    group_cost[it->second] += cost[i];
  }
  double group_max = 0;
  const std::vector<int> group_owner = greedy(group_cost, ranks, group_max);
  if (group_max > kGroupSlack * item_max) return by_item;
  std::vector<int> owner(cost.size());
  for (size_t i = 0; i < cost.size(); ++i) owner[i] = group_owner[index_of.at(group[i])];
  return owner;
}

std::vector<size_t> owned_by(const std::vector<int>& owner, int rank) {
  std::vector<size_t> mine;
  for (size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] == rank) mine.push_back(i);
  }
  return mine;
}

namespace {

nlohmann::json outcome_json(const Outcome& o) {
  nlohmann::json results = nlohmann::json::array();
  for (const auto& [index, r] : o.results) results.push_back({{"index", index}, {"result", r}});
  return {{"failed", o.failed},
          {"item", o.item},
          {"reason", o.reason},
          {"input_error", o.input_error},
          {"rank_info", o.rank_info},
          {"results", std::move(results)}};
}

}  // namespace

Shared run_shared(const std::vector<size_t>& items, const std::vector<double>& cost, const ItemWork& work,
                  const std::vector<int64_t>& group) {
  QC_CHECK(items.size() == cost.size(), "run_shared: {} items but {} costs", items.size(), cost.size());
  const World& w = world();
  const std::vector<int> owner = assign_by_work(cost, w.size, group);
  std::vector<size_t> mine;
  for (size_t i : owned_by(owner, w.rank)) mine.push_back(items[i]);

  Outcome out;
  std::string in_progress;
  if (w.size == 1) {  // no transport: errors propagate as they are, exactly as without MPI
    work(mine, out, in_progress);
    return {std::move(out.results), {std::move(out.rank_info)}};
  }
  try {
    work(mine, out, in_progress);
  } catch (const Error& e) {
    out.failed = true;
    out.reason = e.what();
    out.input_error = e.kind() == ErrorKind::input;
  } catch (const std::exception& e) {
    out.failed = true;
    out.reason = fmt::format("internal error: {}", e.what());
    out.input_error = false;
  }
  if (out.failed) out.item = in_progress;

  const std::vector<std::string> all = gather(outcome_json(out).dump());
  std::string verdict;  // rank 0's decision, sent to every rank: "" when every rank succeeded
  Shared merged;
  if (w.root()) {
    for (size_t r = 0; r < all.size() && verdict.empty(); ++r) {
      const nlohmann::json o = parse_json(all[r], fmt::format("the results of rank {} (sent to rank 0)", r));
      if (o.at("failed").get<bool>()) {
        const std::string item = o.at("item").get<std::string>();
        verdict = nlohmann::json{{"input_error", o.at("input_error").get<bool>()},
                                 {"message", fmt::format("rank {} of {}{}: {}", r, w.size,
                                                         item.empty() ? "" : fmt::format(", {}", item),
                                                         o.at("reason").get<std::string>())}}
                      .dump();
        break;
      }
      for (const auto& x : o.at("results")) merged.results[x.at("index").get<size_t>()] = x.at("result");
      merged.rank_info.push_back(o.at("rank_info"));
    }
  }
  verdict = broadcast(verdict);
  if (!verdict.empty()) {
    const nlohmann::json v = parse_json(verdict, "rank 0's verdict on the job");
    const int code = v.at("input_error").get<bool>() ? 2 : 3;
    throw JobFailed(code, w.root() ? v.at("message").get<std::string>() : std::string());
  }
  return merged;
}

}  // namespace qc::dist
