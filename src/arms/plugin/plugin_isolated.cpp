// `plugin:<path.so>`: the plugin library run in a `qconform-plugin-host` worker process (the worker
// and its shared memory: plugin_worker.hpp). What it shares with `plugin-inproc:` is in plugin_shared.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include "arms/plugin/plugin_shared.hpp"
#include "arms/plugin/plugin_worker.hpp"

namespace qc::plugin_detail {

namespace {

using plugin_limits::CallTimeLimit;
using plugin_limits::first_difference;

class IsolatedPluginArm final : public PluginArm {
 public:
  IsolatedPluginArm(std::string_view variant, CallTimeLimit limit) : variant_(variant), limit_(limit) {
    lp_.label = fmt::format("plugin:{}", variant);
    lp_.isolated = true;
    lp_.file = resolve_plugin("plugin", variant);
    host_ = plugin_host_path();
    start();
  }

 private:
  // One request to the worker on a layer's codes (int8, or an FP8 kernel's e4m3 codes).
  ArmOutput run_layer(const LayerOperands& ops) override {
    ops.validate();
    std::lock_guard<std::mutex> lock(mutex_);  // one request in flight per worker
    if (!worker_) restart();
    const Layout lay(ops, page_size());
    SharedBuffer& in = worker_->inputs();
    SharedBuffer& out = worker_->outputs();
    in.reserve(lay.inputs_size, "operands");
    out.reserve(lay.outputs_size, "outputs");
    const auto copy_in = [&](size_t piece, const void* data) {
      if (lay.inputs[piece].bytes) std::memcpy(in.base + lay.inputs[piece].offset, data, lay.inputs[piece].bytes);
    };
    copy_in(0, ops.a_q.data());
    copy_in(1, ops.a_scale.data());
    copy_in(2, ops.w_q.data());
    copy_in(3, ops.w_scale.data());
    if (ops.has_bias()) copy_in(4, ops.bias.data());
    std::fill_n(reinterpret_cast<uint16_t*>(out.base + lay.y), ops.m * ops.n, kUnwrittenBf16);
    std::memset(out.base + lay.acc, 0, lay.acc_bytes);
    std::memset(out.base + lay.acc_written, 0, sizeof(int));
    std::memset(out.base + lay.error, 0, kErrorBufferSize);

    proto::RunRequest q{};
    q.h = {proto::kMagic, proto::MessageType::run};
    q.m = ops.m;
    q.n = ops.n;
    q.k = ops.k;
    q.inputs_size = in.size;
    q.outputs_size = out.size;
    q.a_q = lay.inputs[0].offset;
    q.a_scale = lay.inputs[1].offset;
    q.w_q = lay.inputs[2].offset;
    q.w_scale = lay.inputs[3].offset;
    q.bias = ops.has_bias() ? lay.inputs[4].offset : proto::kNone;
    q.y = lay.y;
    q.acc = lay.acc;
    q.acc_written = lay.acc_written;
    q.error = lay.error;
    q.d = proto::kNone;
    std::copy(std::begin(lay.guards), std::end(lay.guards), std::begin(q.guards));

    const std::vector<const void*> sources = {ops.a_q.data(), ops.a_scale.data(), ops.w_q.data(), ops.w_scale.data(),
                                              ops.has_bias() ? ops.bias.data() : nullptr};
    const int rc = exchange(q, lay, lp_.where(ops), "y", sources);
    // Everything is read from qconform's own copy of the outputs, taken when `run` returned.
    const char* seen = snapshot_.data();
    std::vector<char> error(seen + lay.error, seen + lay.error + kErrorBufferSize);
    error.back() = '\0';
    int acc_written = 0;
    std::memcpy(&acc_written, seen + lay.acc_written, sizeof acc_written);
    const auto* y0 = reinterpret_cast<const uint16_t*>(seen + lay.y);
    const auto* acc0 = reinterpret_cast<const int32_t*>(seen + lay.acc);
    const size_t count = static_cast<size_t>(ops.m * ops.n);
    std::vector<int32_t> acc;
    if (acc_written != 0) acc.assign(acc0, acc0 + count);
    return lp_.finish(ops, rc, error.data(), acc_written, std::vector<uint16_t>(y0, y0 + count), std::move(acc));
  }

  // One FP8 call: the codes (and, block-scaled, the scales of `scaled` in layout `b`) into the operand
  // mapping, `d` out of the output mapping.
  std::vector<float> call_fp8(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                              const LayerOperands* scaled, const Loaded::BlockArgs& b) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!worker_) restart();
    const Layout lay(m, n, k, page_size(), scaled ? scaled->a_scale.size() : 0, scaled ? scaled->w_scale.size() : 0);
    SharedBuffer& in = worker_->inputs();
    SharedBuffer& out = worker_->outputs();
    in.reserve(lay.inputs_size, "operands");
    out.reserve(lay.outputs_size, "outputs");
    std::memcpy(in.base + lay.inputs[0].offset, a, lay.inputs[0].bytes);
    std::memcpy(in.base + lay.inputs[1].offset, w, lay.inputs[1].bytes);
    if (scaled != nullptr) {
      std::memcpy(in.base + lay.inputs[2].offset, scaled->a_scale.data(), lay.inputs[2].bytes);
      std::memcpy(in.base + lay.inputs[3].offset, scaled->w_scale.data(), lay.inputs[3].bytes);
    }
    std::fill_n(reinterpret_cast<uint32_t*>(out.base + lay.y), m * n, kUnwrittenF32);
    std::memset(out.base + lay.acc_written, 0, sizeof(int));
    std::memset(out.base + lay.error, 0, kErrorBufferSize);
    proto::RunRequest q{};
    q.h = {proto::kMagic, proto::MessageType::run};
    q.m = m;
    q.n = n;
    q.k = k;
    q.inputs_size = in.size;
    q.outputs_size = out.size;
    q.a_q = lay.inputs[0].offset;
    q.w_q = lay.inputs[1].offset;
    q.a_scale = q.w_scale = q.bias = q.y = q.acc = proto::kNone;
    q.acc_written = lay.acc_written;
    q.error = lay.error;
    q.d = lay.y;
    if (scaled != nullptr) {
      q.a_scale = lay.inputs[2].offset;
      q.w_scale = lay.inputs[3].offset;
      q.block_k = b.block_k;
      q.a_scale_cols = b.a_scale_cols;
      q.w_block_rows = b.w_block_rows;
      q.w_scale_cols = b.w_scale_cols;
    }
    std::copy(std::begin(lay.guards), std::end(lay.guards), std::begin(q.guards));
    const std::string where =
        scaled != nullptr ? lp_.where(*scaled)
                          : fmt::format("arm `{}` (kernel `{}`) on an FP8 GEMM (m={} n={} k={})", printable(lp_.label),
                                        printable(lp_.d.name), m, n, k);
    const int rc = exchange(q, lay, where, "d",
                            {a, w, scaled ? scaled->a_scale.data() : nullptr, scaled ? scaled->w_scale.data() : nullptr});
    const char* seen = snapshot_.data();
    std::vector<char> error(seen + lay.error, seen + lay.error + kErrorBufferSize);
    error.back() = '\0';
    return lp_.finish_fp8(m, n, k, rc, error.data(), reinterpret_cast<const float*>(seen + lay.y));
  }

  // Sends `q` and waits for `run` to return: its return code, or the arm's failure (a time limit,
  // a fault, the worker's end, a write after `run` returned), named with `where`; `output` names the
  // buffer at `lay.y`; `sources[i]` is what qconform copied into input piece i. On return,
  // `snapshot_` holds the outputs as `run` left them.
  int exchange(const proto::RunRequest& q, const Layout& lay, const std::string& where, const char* output,
               const std::vector<const void*>& sources) {
    const double macs = static_cast<double>(q.m) * static_cast<double>(q.n) * static_cast<double>(q.k);
    const double limit = limit_.for_call(macs);
    const auto started = Clock::now();
    const auto deadline = started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
    if (!worker_->send(&q, sizeof q)) fail(fmt::format("{} failed: {}", where, ended(std::chrono::milliseconds(1000))));

    proto::Header h{};
    ReadStatus st = worker_->read(&h, sizeof h, deadline);
    if (st == ReadStatus::ok && h.magic == proto::kMagic && h.type == proto::MessageType::done) {
      proto::Done d{};
      st = worker_->read(reinterpret_cast<char*>(&d) + sizeof h, sizeof d - sizeof h, deadline);
      if (st == ReadStatus::ok) {
        limit_.record(std::chrono::duration<double>(Clock::now() - started).count(), macs);
        check_after_return(q, lay, where, output, sources, d.outputs_sum);
        return d.rc;
      }
    }
    if (st == ReadStatus::timeout) {
      worker_->kill_now();
      fail(fmt::format("{} failed: `run` did not return within the per-call time limit of {} s ({}); the worker "
                       "process was killed", where, CallTimeLimit::shown(limit), limit_.describe(macs)));
    }
    if (st == ReadStatus::eof) fail(fmt::format("{} failed during `run`: {}", where, ended(std::chrono::milliseconds(1000))));
    if (h.magic == proto::kMagic && h.type == proto::MessageType::fault) fail_fault(lay, where, output, "", deadline);
    worker_->kill_now();
    fail(fmt::format("{} failed: the worker process sent a malformed reply (magic 0x{:x}, type {}); it was killed", where,
                     h.magic, static_cast<uint32_t>(h.type)));
  }

  // The Fault message after its header: the arm's failure, named by the region the plugin hit.
  [[noreturn]] void fail_fault(const Layout& lay, const std::string& where, const char* output, const char* when,
                               Clock::time_point deadline) {
    proto::Fault f{};
    if (worker_->read(reinterpret_cast<char*>(&f) + sizeof(proto::Header), sizeof f - sizeof(proto::Header), deadline) !=
        ReadStatus::ok) {
      fail(fmt::format("{} failed{}: {}", where, when, ended(std::chrono::milliseconds(1000))));
    }
    const std::string how = ended(std::chrono::milliseconds(2000));
    if (f.region == proto::FaultRegion::inputs) {
      fail(fmt::format("{} failed: C3 (shared operands) violated: the plugin wrote into its read-only input {}{}; the "
                       "write was refused (the worker maps the operands read-only) and {}",
                       where, lay.describe_input(f.offset), when, how));
    }
    if (f.region == proto::FaultRegion::guard && f.guard_index < 3) {
      const char* const kBuffers[3] = {"error", output, "acc"};
      const uint64_t end = f.guard_index == 0   ? lay.error + kErrorBufferSize
                           : f.guard_index == 1 ? lay.y + lay.y_bytes
                                                : lay.acc + lay.acc_bytes;
      fail(fmt::format("{} failed: the plugin wrote past the end of its output `{}`{} (byte {} after its last byte; the "
                       "buffer holds {} bytes) and {}", where, kBuffers[f.guard_index], when,
                       lay.guards[f.guard_index] + f.offset - end,
                       f.guard_index == 0 ? kErrorBufferSize : end - (f.guard_index == 1 ? lay.y : lay.acc), how));
    }
    fail(fmt::format("{} failed: invalid memory access{} ({} at address 0x{:x}, si_code {}) and {}", where, when,
                     signal_name(f.signo), f.offset, f.code, how));
  }

  // After Done: the outputs are copied (`snapshot_`) and must still be what `run` left (the worker's
  // sum), the inputs what qconform put there; after the worker's grace period (Settled), both are
  // compared again. A thread of the plugin that writes after `run` returned fails the arm.
  void check_after_return(const proto::RunRequest& q, const Layout& lay, const std::string& where, const char* output,
                          const std::vector<const void*>& sources, uint64_t worker_sum) {
    const SharedBuffer& out = worker_->outputs();
    snapshot_.assign(out.base, out.base + out.size);
    if (proto::outputs_sum(snapshot_.data(), q) != worker_sum) {
      fail(fmt::format("{} failed: the plugin changed its outputs after `run` returned (the worker's sum of them when "
                       "`run` returned differs from qconform's copy taken right after): a thread of the plugin still "
                       "writing?", where));
    }
    // The worker does not sum its inputs (they may be large): a change seen now happened during
    // `run` or just after it, and is named so.
    check_inputs(lay, where, sources, " (during `run`, or by a thread of it right after)");
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    proto::Header h{};
    const ReadStatus st = worker_->read(&h, sizeof h, deadline);
    const char* const kWhen = " after `run` returned (within the grace period)";
    if (st == ReadStatus::ok && h.magic == proto::kMagic && h.type == proto::MessageType::fault) {
      fail_fault(lay, where, output, kWhen, deadline);
    }
    if (st != ReadStatus::ok || h.magic != proto::kMagic || h.type != proto::MessageType::settled) {
      if (st == ReadStatus::eof) fail(fmt::format("{} failed after `run` returned: {}", where, ended(std::chrono::milliseconds(1000))));
      worker_->kill_now();
      fail(fmt::format("{} failed: the worker process did not end the grace period after `run` properly ({}); it was "
                       "killed", where, st == ReadStatus::timeout ? "no message within 10 s" : "a malformed message"));
    }
    check_inputs(lay, where, sources, kWhen);
    const auto mn = static_cast<uint64_t>(q.m) * static_cast<uint64_t>(q.n);
    const struct {
      const char* name;
      uint64_t offset, bytes, element;
    } buffers[] = {{"error", q.error, kErrorBufferSize, 1},
                   {"acc_written", q.acc_written, sizeof(int), sizeof(int)},
                   {output, q.d != proto::kNone ? q.d : q.y, (q.d != proto::kNone ? 4 : 2) * mn, q.d != proto::kNone ? 4u : 2u},
                   {"acc", q.acc, q.acc == proto::kNone ? 0 : 4 * mn, 4}};
    for (const auto& b : buffers) {
      const auto at = first_difference(snapshot_.data() + b.offset, out.base + b.offset, b.bytes);
      if (!at) continue;
      const uint64_t e = *at / b.element;
      const auto bits = [&](const char* base) {
        uint64_t v = 0;
        std::memcpy(&v, base + b.offset + e * b.element, b.element);
        return fmt::format("0x{:0{}x}", v, 2 * b.element);
      };
      fail(fmt::format("{} failed: the plugin wrote into its output `{}`{} ({}: {} when `run` returned, {} after): a "
                       "thread of the plugin still running? Outputs count only as `run` leaves them", where, b.name, kWhen,
                       b.element > 1 && b.bytes == b.element * mn && q.n > 0
                           ? fmt::format("element [{},{}]", e / static_cast<uint64_t>(q.n), e % static_cast<uint64_t>(q.n))
                           : fmt::format("byte {}", e),
                       bits(snapshot_.data()), bits(out.base)));
    }
  }

  // The operand mapping must still hold what qconform copied in: the worker maps it read-only, so
  // a change means the plugin reached it another way (e.g. reopening the memfd writable).
  void check_inputs(const Layout& lay, const std::string& where, const std::vector<const void*>& sources,
                    const char* when) {
    const SharedBuffer& in = worker_->inputs();
    for (size_t i = 0; i < lay.inputs.size() && i < sources.size(); ++i) {
      const Layout::Piece& p = lay.inputs[i];
      if (sources[i] == nullptr || p.bytes == 0) continue;
      if (const auto at = first_difference(static_cast<const char*>(sources[i]), in.base + p.offset, p.bytes)) {
        fail(fmt::format("{} failed: C3 (shared operands) violated: the plugin changed its read-only input {}{} (through "
                         "another mapping of the operand memory than the read-only one it was given)",
                         where, lay.describe_input(p.offset + *at), when));
      }
    }
  }

  static size_t page_size() {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : 4096;
  }

  // How the worker ended; it is gone afterwards (the next run starts a new one).
  std::string ended(std::chrono::milliseconds grace) {
    std::string how = worker_->reap(grace);
    worker_.reset();
    return how;
  }

  [[noreturn]] void fail(const std::string& message) {
    worker_.reset();
    QC_FAIL_ARM("{}; qconform itself is unaffected (plugin arms run in a worker process; see docs/plugins.md)", message);
  }

  // Starts the worker and validates what it reports of the library.
  void start() {
    worker_ = std::make_unique<Worker>(host_, lp_.file.path);
    const std::string p = printable(lp_.file.path);
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_.for_load()));
    const std::string loading = fmt::format("arm `{}` failed while loading `{}` in its worker process", printable(lp_.label), p);
    proto::Header h{};
    ReadStatus st = worker_->read(&h, sizeof h, deadline);
    if (st == ReadStatus::timeout) {
      worker_->kill_now();
      fail(fmt::format("{}: it did not finish loading within the time limit of {} s ({}); the worker process was "
                       "killed", loading, CallTimeLimit::shown(limit_.for_load()), limit_.describe_load()));
    }
    if (st == ReadStatus::eof) fail(fmt::format("{}: {}", loading, ended(std::chrono::milliseconds(1000))));
    const auto read_string = [&](uint64_t size, std::string& s) {
      if (size > proto::kMaxString) return false;
      s.resize(size);
      return worker_->read(s.data(), size, deadline) == ReadStatus::ok;
    };
    if (h.magic == proto::kMagic && h.type == proto::MessageType::load_error) {
      proto::LoadError e{};
      std::string message;
      if (worker_->read(reinterpret_cast<char*>(&e) + sizeof h, sizeof e - sizeof h, deadline) == ReadStatus::ok &&
          read_string(e.message_size, message)) {
        worker_.reset();
        switch (e.what) {
          case proto::LoadFailure::dlopen:
            QC_FAIL_INPUT("plugin `{}`: dlopen failed: {}", p, printable(message));
          case proto::LoadFailure::no_symbol:
            QC_FAIL_INPUT("plugin `{}`: symbol `{}` not found (a qconform arm plugin exports `const qc_arm_v1* "
                          "{}(void)`, see include/qconform/arm_abi.h): {}", p, QC_ARM_V1_ENTRY_SYMBOL,
                          QC_ARM_V1_ENTRY_SYMBOL, printable(message));
          case proto::LoadFailure::entry_null:
            QC_FAIL_INPUT("plugin `{}`: `{}()` returned NULL; expected a pointer to a qc_arm_v1", p,
                          QC_ARM_V1_ENTRY_SYMBOL);
          default:
            break;
        }
      }
    } else if (h.magic == proto::kMagic && h.type == proto::MessageType::hello) {
      proto::Hello hello{};
      Descriptor d;
      if (worker_->read(reinterpret_cast<char*>(&hello) + sizeof h, sizeof hello - sizeof h, deadline) == ReadStatus::ok &&
          read_string(hello.name_size, d.name) && read_string(hello.epilogue_size, d.epilogue) &&
          read_string(hello.model_size, d.accumulation_model)) {
        if (hello.protocol_version != proto::kProtocolVersion) worker_.reset();
        QC_INPUT(hello.protocol_version == proto::kProtocolVersion,
                 "isolated plugin arm: the worker `{}` speaks protocol {}, this qconform {} (a host from another "
                 "build; set QCONFORM_PLUGIN_HOST to this build's)", printable(host_), hello.protocol_version,
                 proto::kProtocolVersion);
        d.abi_version = hello.abi_version;
        d.struct_size = hello.struct_size;
        d.has_name = hello.has_name != 0;
        d.has_epilogue = hello.has_epilogue != 0;
        d.has_run = hello.has_run != 0;
        d.has_model = hello.has_model != 0;
        d.block_k = hello.block_k;
        d.block_n = hello.block_n;
        d.flags = hello.flags;
        if (!lp_.d.name.empty()) {
          // A restart: the library must still be the one first loaded.
          const bool same = d.name == lp_.d.name && d.flags == lp_.d.flags && d.epilogue == lp_.d.epilogue &&
                            d.accumulation_model == lp_.d.accumulation_model && d.block_k == lp_.d.block_k &&
                            d.block_n == lp_.d.block_n;
          if (!same) worker_.reset();
          QC_INPUT(same,
                   "plugin `{}`: its descriptor changed since the arm was created", p);
          return;
        }
        try {
          validate(lp_.file.path, d);
        } catch (const Error&) {
          worker_.reset();
          throw;
        }
        lp_.d = std::move(d);
        return;
      }
    } else if (h.magic == proto::kMagic && h.type == proto::MessageType::fault) {
      proto::Fault f{};
      if (worker_->read(reinterpret_cast<char*>(&f) + sizeof h, sizeof f - sizeof h, deadline) == ReadStatus::ok) {
        fail(fmt::format("{}: invalid memory access ({} at address 0x{:x}) and {}", loading, signal_name(f.signo),
                         f.offset, ended(std::chrono::milliseconds(2000))));
      }
    }
    if (worker_) worker_->kill_now();
    fail(fmt::format("{}: the worker process sent a malformed message (magic 0x{:x}, type {}); it was killed", loading,
                     h.magic, static_cast<uint32_t>(h.type)));
  }

  // A new worker after a failure: the file must still be the one hashed when the arm was made.
  void restart() {
    const PluginFile now = resolve_plugin("plugin", variant_);
    QC_INPUT(now.sha256 == lp_.file.sha256 && now.path == lp_.file.path,
             "plugin `{}`: the file changed since the arm was created ({} then, {} now); refusing to restart its "
             "worker with other code", printable(lp_.file.path), lp_.file.sha256, now.sha256);
    start();
  }

  std::string variant_;
  std::string host_;
  CallTimeLimit limit_;
  std::vector<char> snapshot_;  // the outputs mapping as `run` left it (exchange)
  std::unique_ptr<Worker> worker_;
  std::mutex mutex_;
};

}  // namespace

std::unique_ptr<Arm> make_isolated_plugin_arm(std::string_view variant, CallTimeLimit limit) {
  return std::make_unique<IsolatedPluginArm>(variant, limit);
}

}  // namespace qc::plugin_detail
