#include "orchestrate/ranks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "core/fileio.hpp"
#include "core/output_lock.hpp"
#include "core/results_json.hpp"
#include "core/sha256.hpp"

namespace qc {

namespace fs = std::filesystem;

namespace {

// One shard's output on the wire: the shard index, the record (JSON) and the bf16 outputs, each
// length-prefixed; an error is a shard index of -1, then its exit code and message.
void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
uint64_t get_u64(const std::string& in, size_t& at) {
  QC_CHECK(at + sizeof(uint64_t) <= in.size(), "C8 shards: a message of {} bytes ends at {}", in.size(), at);
  uint64_t v = 0;
  std::memcpy(&v, in.data() + at, sizeof v);
  at += sizeof v;
  return v;
}
std::string get_bytes(const std::string& in, size_t& at) {
  const uint64_t len = get_u64(in, at);
  QC_CHECK(at + len <= in.size(), "C8 shards: a message of {} bytes ends at {}", in.size(), at);
  std::string s = in.substr(at, len);
  at += len;
  return s;
}
void put_bytes(std::string& out, std::string_view bytes) {
  put_u64(out, bytes.size());
  out.append(bytes);
}

}  // namespace

std::string rank_shard_placement() {
  const int r = dist::world().size;
  return r == 1 ? "this process" : fmt::format("{} MPI ranks (shard t on rank t mod {}; fixed-order reduction on rank 0)", r, r);
}

ShardRunner rank_shard_runner() {
  return [](Arm& arm, const std::vector<LayerOperands>& shards) -> std::optional<std::vector<ArmOutput>> {
    const dist::World& w = dist::world();
    std::string mine;
    // An error ends this rank's part: the exit code one process would give (1 an arm that failed, 2 an
    // input, 3 internal) and the message, in place of its shards.
    const auto failed = [&](int code, const char* what) {
      mine.clear();
      put_u64(mine, ~uint64_t{0});
      put_u64(mine, static_cast<uint64_t>(code));
      put_bytes(mine, fmt::format("rank {}: {}", w.rank, what));
    };
    try {
      for (size_t t = static_cast<size_t>(w.rank); t < shards.size(); t += static_cast<size_t>(w.size)) {
        ArmOutput out = arm.run(shards[t]);
        out.record.extra["rank"] = w.rank;
        put_u64(mine, t);
        put_bytes(mine, nlohmann::json(out.record).dump());
        put_bytes(mine, std::string_view(reinterpret_cast<const char*>(out.y.data()), out.y.size() * sizeof(uint16_t)));
      }
    } catch (const Error& e) {
      failed(e.kind() == ErrorKind::arm_failure ? 1 : e.kind() == ErrorKind::input ? 2 : 3, e.what());
    } catch (const std::exception& e) {
      failed(3, e.what());
    }
    const std::vector<std::string> parts = dist::gather(mine);
    nlohmann::json failure;  // {"code", "message"} from the first rank that failed; null when none did
    std::vector<ArmOutput> outs(shards.size());
    if (w.root()) {
      std::vector<bool> seen(shards.size(), false);
      for (const std::string& part : parts) {
        for (size_t at = 0; at < part.size() && failure.is_null();) {
          const uint64_t t = get_u64(part, at);
          if (t == ~uint64_t{0}) {
            const uint64_t code = get_u64(part, at);
            failure = {{"code", code}, {"message", get_bytes(part, at)}};
            break;
          }
          QC_CHECK(t < shards.size() && !seen[t], "C8 shards: shard {} received twice or out of range", t);
          seen[t] = true;
          outs[t].record = nlohmann::json::parse(get_bytes(part, at)).get<RunRecord>();
          const std::string y = get_bytes(part, at);
          outs[t].y.resize(y.size() / sizeof(uint16_t));
          std::memcpy(outs[t].y.data(), y.data(), outs[t].y.size() * sizeof(uint16_t));
        }
        if (!failure.is_null()) break;
      }
      for (size_t t = 0; t < shards.size() && failure.is_null(); ++t) QC_CHECK(seen[t], "C8 shards: shard {} never arrived", t);
    }
    // Every rank learns whether the degree can go on (a failure ends the job on every rank alike).
    failure = nlohmann::json::parse(dist::broadcast(failure.dump()));
    if (!failure.is_null()) {
      throw dist::JobFailed(failure.at("code").get<int>(), w.root() ? failure.at("message").get<std::string>() : std::string());
    }
    if (!w.root()) return std::nullopt;
    return outs;
  };
}

std::vector<double> layer_costs(const OperandSet& set) {
  std::vector<double> cost;
  for (const LayerHeader& h : set.headers) cost.push_back(static_cast<double>(h.m) * static_cast<double>(h.n) * static_cast<double>(h.k));
  return cost;
}

std::vector<int64_t> layer_groups(const OperandSet& set, const std::vector<size_t>& layers) {
  std::map<std::string, int64_t> id;
  std::vector<int64_t> group;
  for (size_t i : layers) group.push_back(id.try_emplace(set.headers[i].shard, static_cast<int64_t>(id.size())).first->second);
  return group;
}

std::vector<size_t> remaining(size_t count, const std::map<size_t, nlohmann::json>& done) {
  std::vector<size_t> left;
  for (size_t i = 0; i < count; ++i) {
    if (!done.count(i)) left.push_back(i);
  }
  return left;
}

PredictionSet predict_shared(const OperandSet& set, bool everywhere, const LayerProgress& progress) {
  const std::vector<size_t> items = remaining(set.size(), {});
  const std::vector<double> cost = layer_costs(set);
  size_t completed = 0;
  const dist::Shared shared = dist::run_shared(items, cost, [&](const std::vector<size_t>& mine, dist::Outcome& out,
                                                               std::string& in_progress) {
    for (size_t i : mine) {
      in_progress = fmt::format("layer {} `{}`", i, set.headers[i].name);
      out.results[i] = to_json(predict_layer(set.load(i)));
      if (dist::world().root() && progress) progress(++completed, mine.size(), set.headers[i].name);
    }
  }, layer_groups(set, items));
  std::string text;
  PredictionSet p;
  p.operands_path = set.path;
  p.operands_sha256 = set.sha256;
  if (dist::world().root()) {
    for (size_t i = 0; i < set.size(); ++i) p.layers.push_back(layer_prediction_from_json(shared.results.at(i)));
    text = to_json(p).dump();
  }
  if (!everywhere || dist::world().size == 1) return p;
  text = dist::broadcast(text);
  return prediction_set_from_json(parse_json(text, "the predictions from rank 0"), "predictions from rank 0");
}

void use_gpu_of_local_rank() {
  const dist::World& w = dist::world();
  std::vector<std::string> devices;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr && *visible != '\0') {
    std::string_view rest = visible;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      devices.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    QC_INPUT(static_cast<size_t>(w.local_rank) < devices.size(),
             "--gpu-per-rank: local rank {} of {} on this host, but CUDA_VISIBLE_DEVICES={} names {} devices: expected "
             "one GPU per rank",
             w.local_rank, w.local_size, visible, devices.size());
    setenv("CUDA_VISIBLE_DEVICES", devices[static_cast<size_t>(w.local_rank)].c_str(), 1);
  } else {
    setenv("CUDA_VISIBLE_DEVICES", std::to_string(w.local_rank).c_str(), 1);
  }
}

ResumeDir::ResumeDir(std::string dir, const nlohmann::json& identity, std::vector<std::string> names)
    : dir_(std::move(dir)),
      identity_("sha256:" + sha256_hex(std::string_view(identity.dump()))),
      identity_fields_(identity),
      names_(std::move(names)) {
  if (!enabled()) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  QC_INPUT(!ec && fs::is_directory(dir_), "--resume {}: expected a directory (or a path where one can be made), {}", dir_,
           ec ? ec.message() : "found a file");
  lock_output("--resume", dir_);  // one writer of the directory at a time
}

std::string identity_difference(const nlohmann::json& recorded, const nlohmann::json& now) {
  if (!recorded.is_object()) return "it records no `identity` to compare field by field (made by an older qconform)";
  std::vector<std::string> differences;
  std::set<std::string> keys;
  for (const auto& [key, value] : recorded.items()) keys.insert(key);
  for (const auto& [key, value] : now.items()) keys.insert(key);
  for (const std::string& key : keys) {
    const nlohmann::json a = recorded.contains(key) ? recorded[key] : nlohmann::json();
    const nlohmann::json b = now.contains(key) ? now[key] : nlohmann::json();
    if (a == b) continue;
    differences.push_back(fmt::format("`{}` was {} there, is {} now", key, a.is_null() ? "absent" : printable_text(a.dump()),
                                      b.is_null() ? "absent" : printable_text(b.dump())));
  }
  if (differences.empty()) return "its `identity` fields equal this run's, but not their digest: the file was edited";
  return fmt::format("{}", fmt::join(differences, "; "));
}

std::string ResumeDir::path_of(size_t index) const { return (fs::path(dir_) / fmt::format("layer-{:05}.json", index)).string(); }

std::map<size_t, nlohmann::json> ResumeDir::load() const {
  std::map<size_t, nlohmann::json> done;
  if (!enabled()) return done;
  for (size_t i = 0; i < names_.size(); ++i) {
    const std::string path = path_of(i);
    if (!fs::exists(path)) continue;
    nlohmann::json j;
    try {
      // Bounded nesting, and a FIFO or device in the directory is refused without blocking.
      j = parse_json(read_file(path), path);
    } catch (const Error& e) {
      fmt::print(stderr, "qconform: --resume: {} is not valid JSON ({}); layer {} is computed again\n", path, e.what(), i);
      continue;
    }
    const std::string run = j.is_object() ? j.value("run", "") : "";
    QC_INPUT(run == identity_,
             "{}: field `run`: expected {} (the digest of this run's inputs and options), found {}: the directory holds "
             "results of another run ({}); use a fresh --resume directory, or rerun with the inputs and options it was "
             "made with",
             path, identity_, run.empty() ? "nothing" : run,
             identity_difference(j.is_object() && j.contains("identity") ? j["identity"] : nlohmann::json(), identity_fields_));
    QC_INPUT(j.value("index", static_cast<size_t>(-1)) == i && j.value("layer", "") == names_[i],
             "{}: fields `index`, `layer`: expected {} `{}`, found {} `{}`", path, i, names_[i],
             j.contains("index") ? j["index"].dump() : "nothing", j.value("layer", ""));
    const std::string want = j.value("sha256", "");
    const std::string got = j.contains("result") ? "sha256:" + sha256_hex(std::string_view(j["result"].dump())) : "";
    if (want != got) {
      fmt::print(stderr, "qconform: --resume: {}: field `sha256`: expected {}, the result's digest is {}; layer {} is "
                         "computed again\n", path, want, got, i);
      continue;
    }
    done[i] = j["result"];
  }
  return done;
}

void ResumeDir::store(size_t index, const nlohmann::json& result) const {
  if (!enabled()) return;
  const nlohmann::json j = results_envelope("layer-result",
                                            {{"run", identity_},
                                             {"identity", identity_fields_},
                                             {"index", index},
                                             {"layer", names_.at(index)},
                                             {"sha256", "sha256:" + sha256_hex(std::string_view(result.dump()))},
                                             {"result", result}});
  write_file_atomic(path_of(index), j.dump() + "\n");
}

std::map<size_t, nlohmann::json> broadcast_done(const std::map<size_t, nlohmann::json>& on_root) {
  if (dist::world().size == 1) return on_root;
  nlohmann::json indices = nlohmann::json::array();
  for (const auto& [i, r] : on_root) indices.push_back(i);
  const nlohmann::json all = parse_json(dist::broadcast(indices.dump()), "the resumed layers from rank 0");
  if (dist::world().root()) return on_root;
  std::map<size_t, nlohmann::json> done;
  for (const auto& i : all) done[i.get<size_t>()] = nullptr;  // other ranks need only which layers are done
  return done;
}

}  // namespace qc
