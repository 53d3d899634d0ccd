// verify's device pipeline, the device side (cuda.hpp, `GpuVerifyLayer`): a layer's operands resident
// with their pristine copies, the exact accumulators and C2's counts computed where they are, the arms'
// outputs in buffers the pipeline owns, and the element pass (kernels/verify_pass.cu) whose counts alone
// come back, with the rows the host lists from.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "arms/cuda/cuda.hpp"
#include "arms/cuda/cuda_common.hpp"
#include "accum/fp8_model.hpp"
#include "core/env_setting.hpp"
#include "core/fileio.hpp"
#include "core/tree_leaves.hpp"
#include "arms/cuda/kernels/fp8_accum_model.cuh"
#include "arms/cuda/kernels/int64_exact_accum.cuh"
#include "arms/cuda/kernels/sha256_leaves.cuh"
#include "arms/cuda/kernels/sm90_int32_scaled_epilogue.cuh"
#include "arms/cuda/kernels/verify_pass.cuh"

namespace qc {

using cuda::DeviceScratch;

bool gpu_pass_takes(const Epilogue& e) {
  return e.kind != EpilogueKind::exact && e.kind != EpilogueKind::point &&
         formula::has_kernel_instance(formula::instance_kind(e.kind, 1, 16));
}

namespace {

// Pieces of the operands in the order of the host's C3 (`OperandSnapshot`): a_q, a_scale, w_scale, bias, w_q.
enum Piece : int { kA, kSa, kSw, kBias, kW, kPieces };

// Pinned host memory for what every run brings back (counts), reused.
template <class T>
class PinnedSlot {
 public:
  PinnedSlot() { QC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p_), sizeof(T))); }
  ~PinnedSlot() { cudaFreeHost(p_); }
  PinnedSlot(const PinnedSlot&) = delete;
  PinnedSlot& operator=(const PinnedSlot&) = delete;
  T* get() const { return p_; }
  void swap(PinnedSlot& other) noexcept { std::swap(p_, other.p_); }

 private:
  T* p_ = nullptr;
};

// Uploads from pageable memory (the operands' mapped files) at the link's pace: a large array is cut into
// pieces that `workers` threads copy into pinned slots in parallel, each slot going to the device by DMA
// behind its copy; a slot is written again once its DMA is done. The workers claim the pieces one at a time
// (a worker that finds its reads quick takes more), and the pieces are cut to the array: at least two per
// worker down to 1 MiB (a 70B model's 8 MiB k_proj is 8 pieces, not one worker's single chunk), at most the
// chunk. A plain `cudaMemcpyAsync` from pageable memory is one thread's staging copy, 7-9 GB/s on the H100
// machine, where the layers of a 70B model need their 72 GB at the link's ~55 GB/s (pinned).
class PinnedStager {
 public:
  // The largest piece and a slot's size (2 MiB, or QC_UPLOAD_CHUNK_MIB, 1 to 64; docs/gpu.md), read once; an
  // array smaller than 1 MiB goes in one cudaMemcpyAsync. Small slots stay in the host's last-level cache
  // between the worker's write and the DMA's read: on the H100 machine the workers read a 70B model's
  // 71.7 GB in 14-16 worker-seconds with 2 MiB slots against 19-23 with 8 MiB (docs/performance.md).
  static size_t chunk() {
    static const size_t bytes = static_cast<size_t>(env_int("QC_UPLOAD_CHUNK_MIB", 2, 1, 64)) << 20;
    return bytes;
  }
  // The piece for an array of `bytes` among `workers`: about bytes / (2 * workers), in whole MiB, within
  // [1 MiB, chunk()].
  static size_t piece_for(size_t bytes, int workers) {
    constexpr size_t kMiB = size_t{1} << 20;
    const size_t share = bytes / (2 * static_cast<size_t>(std::max(workers, 1)));
    return std::clamp((share + kMiB - 1) / kMiB * kMiB, kMiB, chunk());
  }
  // What the workers did since the last call, summed over them: seconds reading the files into the slots,
  // and seconds waiting for a slot's DMA before writing it again.
  struct Work {
    double reading = 0, waiting = 0;
  };
  Work take_work() {
    return {static_cast<double>(read_ns_.exchange(0)) * 1e-9, static_cast<double>(wait_ns_.exchange(0)) * 1e-9};
  }

  ~PinnedStager() { free_slots(slots_); }
  // One array to copy: `bytes` from `src` (host, pageable) to `dst` (device).
  struct Array {
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
  };
  // Enqueues the copies of `arrays` on `stream`, the large ones' pieces claimed by the workers from one list
  // (no worker waits at the end of one array while another's remain); when it returns, every `src` has been
  // read (later work on `stream` sees the bytes in every `dst`).
  void upload(std::initializer_list<Array> arrays, cudaStream_t stream) {
    constexpr size_t kMiB = size_t{1} << 20;
    struct Piece {
      const Array* array;
      size_t at, len;
      std::optional<MappedSource> file;  // the array's file, where pread reads it
    };
    std::vector<Piece> pieces;
    std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
    int workers = 0;
    for (const Array& x : arrays) {
      if (x.bytes == 0) continue;
      if (x.bytes < kMiB || PinnedStager::workers() == 0) {
        QC_CUDA_CHECK(cudaMemcpyAsync(x.dst, x.src, x.bytes, cudaMemcpyHostToDevice, stream));
        continue;
      }
      if (!lock.owns_lock()) lock.lock(), workers = ensure_slots();
      const size_t piece = piece_for(x.bytes, workers);
      const std::optional<MappedSource> file = reads() ? find_mapped_source(x.src, x.bytes) : std::nullopt;
      for (size_t at = 0; at < x.bytes; at += piece) pieces.push_back({&x, at, std::min(piece, x.bytes - at), file});
    }
    if (pieces.empty()) return;
    std::atomic<size_t> next{0};
    const int busy = static_cast<int>(std::min<size_t>(static_cast<size_t>(workers), pieces.size()));
    std::vector<std::future<void>> tasks;
    for (int w = 0; w < busy; ++w) {
      tasks.push_back(std::async(std::launch::async, [&, w] {
        using clock = std::chrono::steady_clock;
        int64_t read_ns = 0, wait_ns = 0;
        // Worker w owns slots w and w + workers, alternately: a slot is reused by the thread that filled it.
        for (size_t c = next.fetch_add(1), turn = 0; c < pieces.size(); c = next.fetch_add(1), ++turn) {
          const Piece& p = pieces[c];
          Slot& slot = slots_[static_cast<size_t>(w) + static_cast<size_t>(workers) * (turn % 2)];
          const auto t0 = clock::now();
          if (slot.in_flight) QC_CUDA_CHECK(cudaEventSynchronize(slot.done));
          const auto t1 = clock::now();
          const size_t got = p.file ? read_into(slot.host, p.len, *p.file, p.at) : 0;
          std::memcpy(static_cast<char*>(slot.host) + got, static_cast<const char*>(p.array->src) + p.at + got, p.len - got);
          wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
          read_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t1).count();
          QC_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(p.array->dst) + p.at, slot.host, p.len, cudaMemcpyHostToDevice,
                                        stream));
          QC_CUDA_CHECK(cudaEventRecord(slot.done, stream));
          slot.in_flight = true;
        }
        read_ns_ += read_ns, wait_ns_ += wait_ns;
      }));
    }
    for (auto& t : tasks) t.wait();
    for (auto& t : tasks) t.get();  // rethrows a worker's error once all have stopped
  }

 private:
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
    bool in_flight = false;
  };
  // Reading a mapped file's bytes with pread where `file` names it (the default; QC_UPLOAD_READ=0: through
  // the mapping): the kernel copies from the page cache, without a page fault per page of the mapping.
  static bool reads() {
    static const bool on = env_int("QC_UPLOAD_READ", 1, 0, 1) != 0;
    return on;
  }
  // Up to `len` bytes of the file at the view's offset `at` into `dst`: what pread gave before an error or
  // the file's end (the rest is then copied through the mapping, where a file that shrank raises the
  // mapping's SIGBUS report).
  static size_t read_into(void* dst, size_t len, const MappedSource& file, size_t at) {
    size_t got = 0;
    while (got < len) {
      const ssize_t n = ::pread(file.fd, static_cast<char*>(dst) + got, len - got, static_cast<off_t>(file.offset + at + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    return got;
  }
  // A worker per two cores up to 8 (the rest hash the operands and run the host's passes beside), or
  // QC_UPLOAD_WORKERS (0: a plain cudaMemcpyAsync; docs/gpu.md), read once.
  static int workers() {
    static const int n =
        env_int("QC_UPLOAD_WORKERS", std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 8), 0, 64);
    return n;
  }
  // The slots, allocated at the first large upload (a verify of small layers pins nothing): two per worker.
  // Made whole or not at all: a failure frees what was made and leaves no slots.
  int ensure_slots() {
    if (slots_.empty()) {
      std::vector<Slot> made(static_cast<size_t>(2 * workers()));
      try {
        for (Slot& s : made) {
          QC_CUDA_CHECK(cudaHostAlloc(&s.host, chunk(), cudaHostAllocDefault));
          QC_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
        }
      } catch (...) {
        free_slots(made);
        throw;
      }
      slots_ = std::move(made);
    }
    return static_cast<int>(slots_.size() / 2);
  }
  static void free_slots(std::vector<Slot>& slots) {
    for (Slot& s : slots) {
      if (s.done != nullptr) {
        cudaEventSynchronize(s.done);
        cudaEventDestroy(s.done);
      }
      if (s.host != nullptr) cudaFreeHost(s.host);
    }
    slots.clear();
  }
  std::mutex mutex_;
  std::vector<Slot> slots_;
  std::atomic<int64_t> read_ns_{0}, wait_ns_{0};
};

// Pinned host memory that grows and is kept (the listed rows land here: a device-to-host copy into pageable
// memory goes through the driver's own staging at a fraction of the link's pace).
class PinnedBytes {
 public:
  PinnedBytes() = default;
  ~PinnedBytes() {
    if (p_ != nullptr) cudaFreeHost(p_);
  }
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;
  unsigned char* reserve(size_t bytes) {
    if (bytes > capacity_) {
      if (p_ != nullptr) cudaFreeHost(p_);
      p_ = nullptr, capacity_ = 0;
      QC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p_), bytes));
      capacity_ = bytes;
    }
    return p_;
  }
  const unsigned char* data() const { return p_; }
  unsigned char* data() { return p_; }

 private:
  unsigned char* p_ = nullptr;
  size_t capacity_ = 0;
};

// A layer's FP8 model accumulators by model name, in buffers kept from layer to layer (a cudaFree waits
// for the whole device): `ready` names those that hold this layer's values.
struct ModelSet {
  std::map<std::string, DeviceScratch<float>> buffers;
  std::set<std::string> ready;

  const float* find(const std::string& name) const {
    return ready.count(name) != 0 ? buffers.at(name).get() : nullptr;
  }
  float* slot(const std::string& name, size_t count) { return buffers[name].reserve(count); }
};

// The tree digest's leaves (core/tree_leaves.hpp) of the arrays one upload brings from registered
// mappings: hashed on the device from the pristine copies as they land, brought back into pinned memory
// behind them, and given to their files' leaves once the upload's stream has been waited for (`give`).
// Kept from layer to layer, grown to the largest.
class LeafHashes {
  static_assert(cuda_kernels::kSha256LeafBytes == kTreeDigestLeaf);

 public:
  // Room for the leaves of these host arrays (an upper bound: each array's bytes over the leaf, plus one).
  void begin(std::initializer_list<size_t> bytes) {
    jobs_.clear();  // an upload that failed gives none: the tree reads those leaves itself
    size_t most = 0;
    for (size_t b : bytes) most += b / kTreeDigestLeaf + 1;
    device_.reserve(most * 32);
    host_.reserve(most * 32);
    capacity_ = most, used_ = 0;
  }
  // The whole leaves of `host` (bytes of a registered file, now also at `device` on `stream`), if any.
  void hash(const void* host, const void* device, size_t bytes, cudaStream_t stream) {
    const std::optional<MappedLeaves> file = find_mapped_leaves(host, bytes);
    if (!file) return;
    const WholeLeaves w = whole_leaves(file->offset, bytes);
    if (w.count == 0) return;
    QC_CHECK(used_ + w.count <= capacity_, "LeafHashes::hash: {} leaves past the {} reserved", used_ + w.count, capacity_);
    unsigned char* out = device_.get() + used_ * 32;
    cuda::checked_launch(
        cuda_kernels::launch_sha256_leaves(static_cast<const unsigned char*>(device) + w.skip, w.count, out, stream),
        "verify's device pipeline: the operands' tree leaves");
    QC_CUDA_CHECK(cudaMemcpyAsync(host_.data() + used_ * 32, out, w.count * 32, cudaMemcpyDeviceToHost, stream));
    jobs_.push_back({file->leaves, w.first, w.count, used_});
    used_ += w.count;
  }
  // After the stream has been waited for: the leaves to their files.
  void give() {
    for (const Job& j : jobs_) j.leaves->put(j.first, j.count, host_.data() + j.at * 32);
    jobs_.clear();
    used_ = 0;
  }

 private:
  struct Job {
    std::shared_ptr<TreeLeaves> leaves;
    uint64_t first = 0, count = 0;
    size_t at = 0;  // in leaves, into the landing places
  };
  DeviceScratch<unsigned char> device_;
  PinnedBytes host_;
  std::vector<Job> jobs_;
  size_t capacity_ = 0, used_ = 0;
};

// An INT8 layer's exact accumulators (codes a [m,k], w [n,k] on the device) into `exact`, and C2's
// statistics of them into `range`, brought back into `range_host`; enqueued on `on`.
void exact_and_range(const int8_t* a, const int8_t* w, int64_t m, int64_t n, int64_t k, DeviceScratch<int32_t>& exact,
                     DeviceScratch<cuda_kernels::RangeCounts>& range, cuda_kernels::RangeCounts* range_host,
                     cudaStream_t on) {
  int32_t* e = exact.reserve(static_cast<size_t>(m * n));
  cuda::checked_launch(cuda_kernels::launch_int64_exact_accum(a, w, e, static_cast<int>(m), static_cast<int>(n),
                                                              static_cast<int>(k), on),
                       "verify's device pipeline: the exact accumulators");
  cuda_kernels::RangeCounts* r = range.reserve(1);
  QC_CUDA_CHECK(cudaMemsetAsync(r, 0, sizeof(*r), on));
  cuda::checked_launch(cuda_kernels::launch_range_counts(e, m * n, a, m * k, w, static_cast<int>(n), static_cast<int>(k), r, on),
                       "verify's device pipeline: C2's statistics");
  QC_CUDA_CHECK(cudaMemcpyAsync(range_host, r, sizeof(*r), cudaMemcpyDeviceToHost, on));
}

// QC_GPU_TIMELINE=1 (a measurement, docs/performance.md): where the device's time went, from timed events
// around the runs' work on the runs' stream (a run: from its first operands to its counts back), the models'
// evaluations, the uploads (to the last byte's transfer) and their pristine copies with the leaf hashes;
// printed on stderr when the pipeline ends: each kind's busy time, the models beside the runs, and the
// time none of them was on the device.
class GpuTimeline {
 public:
  enum Kind { runs, models, uploads, pristine, kinds };
  GpuTimeline() : on_(env_int("QC_GPU_TIMELINE", 0, 0, 1) != 0) {}
  void begin(Kind kind, cudaStream_t stream, bool unless_open = false) {
    if (!on_) return;
    const std::lock_guard<std::mutex> lock(mu_);
    auto& v = spans_[kind];
    if (unless_open && !v.empty() && v.back()[1] == nullptr) return;
    v.push_back({record(stream), nullptr});
  }
  void end(Kind kind, cudaStream_t stream) {
    if (!on_) return;
    const std::lock_guard<std::mutex> lock(mu_);
    auto& v = spans_[kind];
    if (!v.empty() && v.back()[1] == nullptr) v.back()[1] = record(stream);
  }
  ~GpuTimeline() {
    if (!on_ || cudaDeviceSynchronize() != cudaSuccess) return;
    std::vector<std::tuple<double, int, int>> edges;  // (ms, kind, +1 opens / -1 closes)
    for (int k = 0; k < kinds; ++k) {
      for (const auto& [b, e] : spans_[k]) {
        if (e == nullptr) continue;
        edges.emplace_back(ms(b), k, +1);
        edges.emplace_back(ms(e), k, -1);
      }
    }
    std::sort(edges.begin(), edges.end());
    double busy[kinds] = {}, beside = 0, idle = 0, last = edges.empty() ? 0 : std::get<0>(edges.front());
    int open[kinds] = {};
    for (const auto& [t, k, d] : edges) {
      const double dt = t - last;
      for (int i = 0; i < kinds; ++i) busy[i] += open[i] > 0 ? dt : 0;
      beside += open[runs] > 0 && open[models] > 0 ? dt : 0;
      idle += open[runs] + open[models] + open[uploads] + open[pristine] == 0 ? dt : 0;
      open[k] += d, last = t;
    }
    const double span = edges.empty() ? 0 : last - std::get<0>(edges.front());
    std::fprintf(stderr,
                 "gpu timeline (QC_GPU_TIMELINE): %.1f ms from the first span to the last; the runs' stream busy %.1f ms "
                 "(%zu runs), the models %.1f ms (%zu evaluations), the uploads %.1f ms (%zu), their pristine copies and "
                 "leaf hashes %.1f ms; the models beside the runs %.1f ms; none of them %.1f ms%s\n",
                 span, busy[runs], spans_[runs].size(), busy[models], spans_[models].size(), busy[uploads],
                 spans_[uploads].size(), busy[pristine], beside, idle,
                 unreadable_ > 0 ? fmt::format(" ({} events unreadable, counted at 0 ms: these figures are not "
                                               "the device's)", unreadable_).c_str()
                                 : "");
    for (auto& v : spans_) {
      for (const auto& [b, e] : v) {
        cudaEventDestroy(b);
        if (e != nullptr) cudaEventDestroy(e);
      }
    }
  }

 private:
  cudaEvent_t record(cudaStream_t stream) {
    cudaEvent_t e = nullptr;
    QC_CUDA_CHECK(cudaEventCreate(&e));
    QC_CUDA_CHECK(cudaEventRecord(e, stream));
    if (origin_ == nullptr) origin_ = e;
    return e;
  }
  double ms(cudaEvent_t e) {
    float t = 0;
    if (cudaEventElapsedTime(&t, origin_, e) == cudaSuccess) return t;
    ++unreadable_;
    return 0.0;
  }
  bool on_;
  std::mutex mu_;
  cudaEvent_t origin_ = nullptr;  // the first event recorded (also in a span, destroyed with it)
  int unreadable_ = 0;            // events whose time could not be read (counted at 0 ms: said in the line)
  std::vector<std::array<cudaEvent_t, 2>> spans_[kinds];
};

}  // namespace

struct GpuVerifyLayer::Impl {
  GpuTimeline timeline;  // first in, last out: its destructor waits for the device and reads the events
  cudaStream_t stream = nullptr;
  int64_t m_full = 0, n = 0, k = 0;
  bool bias = false;
  bool fp8 = false;
  Fp8Format fa = Fp8Format::e4m3, fw = Fp8Format::e4m3;
  ModelSet models;                                          // FP8: by name, the layer's rows
  DeviceScratch<uint8_t> wt;                                // FP8: w transposed (the fp64 kernel's scratch)
  DeviceScratch<float> model_state;                         // FP8: the models' chains between launches
  DeviceScratch<float> arm_acc[2];                          // FP8: the arms' exposed accumulators
  // The next layer, uploaded ahead on its own stream by a host thread of its own (`prefetch`) while this
  // layer's runs go on; `load` takes its buffers (swaps them with the current ones) when it is that layer.
  struct Ahead {
    DeviceScratch<int8_t> a, a0, w, w0;
    DeviceScratch<uint16_t> bias, bias0;
    DeviceScratch<uint8_t> wt;
    ModelSet models;                                          // FP8: evaluated right after the upload
    DeviceScratch<float> model_state;                         // FP8: the models' chains between launches
    DeviceScratch<int32_t> exact;                             // INT8: the exact accumulators, after the upload
    DeviceScratch<cuda_kernels::RangeCounts> range;           // INT8: C2's statistics of them
    PinnedSlot<cuda_kernels::RangeCounts> range_host;
    bool has_exact = false;
    bool models_pending = false;                              // FP8, QC_FP8_MODELS_STREAM: on `exact_stream`
    LeafHashes leaves;                                        // of the arrays uploaded
    const void* host[3] = {nullptr, nullptr, nullptr};  // the host arrays uploaded (a, w, bias)
    size_t bytes[3] = {0, 0, 0};
    double seconds = 0;
  } ahead;
  std::future<void> ahead_task;
  // The gate the next layer's models wait behind (`runs_launched`): closed by `prefetch` of an FP8 layer
  // when QC_FP8_MODELS_AFTER > 0 (default 1), opened once the current layer has launched that many runs, or
  // by `load`, the next `prefetch` or the destructor (which then wait for the task).
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool gate_open = true;
  static int models_after() {
    static const int runs = env_int("QC_FP8_MODELS_AFTER", 1, 0, 1 << 20);
    return runs;
  }
  // The models' fp32 evaluation in launches of this many terms of K (cuda_kernels::ModelLaunches; 0: one
  // launch over K): each block of a launch holds its multiprocessor briefly, so the runs' kernels (on the
  // stream of higher priority) wait less behind the next layer's models. QC_FP8_MODEL_LAUNCH_K (512 by
  // default: 512 and 1024 timed alike on H100s, 128 and 256 slower, docs/performance.md).
  static int64_t model_launch_k() {
    static const int64_t k = env_int("QC_FP8_MODEL_LAUNCH_K", 512, 0, 1 << 30);
    return k;
  }
  static cuda_kernels::ModelLaunches launches(DeviceScratch<float>& state, int models, const AccumShape& s) {
    if (model_launch_k() <= 0 || model_launch_k() >= s.k) return {};
    return {model_launch_k(), state.reserve(cuda_kernels::ModelLaunches::state_floats(models, s.m, s.n))};
  }
  void open_gate() {
    {
      const std::lock_guard<std::mutex> lock(gate_mu);
      gate_open = true;
    }
    gate_cv.notify_all();
  }
  void wait_gate() {
    std::unique_lock<std::mutex> lock(gate_mu);
    gate_cv.wait(lock, [this] { return gate_open; });
  }
  bool exact_ahead = false;  // the current layer's exact accumulators and C2's statistics came with its upload
  double ahead_seconds = 0;  // the uploads ahead taken so far (beside the runs)
  cudaStream_t copy_stream = nullptr;
  // The next INT8 layer's exact sums and C2's counts on a stream of their own behind its upload
  // (`upload_done`), so that the upload's task is done once the bytes are there; the runs' stream waits for
  // `exact_done` when it takes the layer. The upload after it waits for them too, or with `prefetch`'s
  // `only_untaken` only when the layer ahead was not taken (its sums then read the buffers the upload
  // writes; a layer taken has swapped them out). QC_EXACT_STREAM=0: on the upload's stream, after it
  // (docs/gpu.md).
  cudaStream_t exact_stream = nullptr;
  cudaEvent_t upload_done = nullptr, exact_done = nullptr;
  static bool exact_beside() {
    static const bool on = env_int("QC_EXACT_STREAM", 1, 0, 1) != 0;
    return on;
  }
  // `previous_done`: recorded on `stream` before a layer's first work, so that the next layer's upload and
  // models, written into the buffers the previous layer used, come after its last use of them on the device
  // (the host waits for every run as well; this states it where the device sees it).
  cudaEvent_t ahead_done = nullptr, previous_done = nullptr;
  // The layer (full rows) and the copies C3 compares with.
  DeviceScratch<int8_t> a, a0, w, w0;
  DeviceScratch<uint16_t> bias_now, bias0;
  DeviceScratch<float> sa, sa0, sw, sw0;
  DeviceScratch<int32_t> exact;
  // The current run.
  int64_t m = 0;
  DeviceScratch<uint16_t> y[2], f[2];
  DeviceScratch<int32_t> acc[2];
  bool has_acc[2] = {false, false};
  // Results of the kernels, and their pinned landing places.
  DeviceScratch<cuda_kernels::RangeCounts> range;
  DeviceScratch<cuda_kernels::PassCounts> counts;
  DeviceScratch<unsigned long long> large_hist, first_diff;
  DeviceScratch<cuda_kernels::OperandDiff> diffs;  // C3, after arm A and after arm B
  DeviceScratch<int64_t> row_ids;
  DeviceScratch<unsigned char> gathered;
  DeviceScratch<unsigned> row_counts;
  DeviceScratch<Bf16SquareSum> square_sum;
  DeviceScratch<uint16_t> near_bits;
  DeviceScratch<double> near_limit;
  PinnedSlot<cuda_kernels::RangeCounts> range_host;
  PinnedSlot<cuda_kernels::PassCounts> counts_host;
  PinnedSlot<std::array<cuda_kernels::OperandDiff, 2>> diffs_host;
  PinnedSlot<double> near_limit_host;

  PinnedStager stager;  // large uploads from the mapped operands
  LeafHashes leaves;    // of the arrays `load` uploads itself (the layer was not uploaded ahead)

  void sync() const { QC_CUDA_CHECK(cudaStreamSynchronize(stream)); }
  // The pristine copy of an array uploaded into `d` (enqueued on `on`), and the tree leaves of the host
  // bytes into `hashes` when they lie in a registered mapping.
  template <class T>
  void keep_pristine(const T* d, T* c, std::span<const T> host, cudaStream_t on, LeafHashes* hashes) {
    if (host.empty()) return;
    QC_CUDA_CHECK(cudaMemcpyAsync(c, d, host.size_bytes(), cudaMemcpyDeviceToDevice, on));
    if (hashes != nullptr) hashes->hash(host.data(), c, host.size_bytes(), on);
  }
  template <class T>
  void copy_to_device(DeviceScratch<T>& dst, DeviceScratch<T>& copy, std::span<const T> host) {
    T* d = dst.reserve(host.size());
    T* c = copy.reserve(host.size());
    stager.upload({{d, host.data(), host.size_bytes()}}, stream);
    keep_pristine<T>(d, c, host, stream, nullptr);
  }
  // The layer's three arrays in one upload, then their pristine copies and tree leaves.
  void upload_layer(const LayerOperands& l, DeviceScratch<int8_t>& a_, DeviceScratch<int8_t>& a0_,
                    DeviceScratch<int8_t>& w_, DeviceScratch<int8_t>& w0_, DeviceScratch<uint16_t>& bias_,
                    DeviceScratch<uint16_t>& bias0_, cudaStream_t on, LeafHashes& hashes) {
    hashes.begin({l.a_q.size_bytes(), l.w_q.size_bytes(), l.bias.size_bytes()});
    int8_t* a = a_.reserve(l.a_q.size());
    int8_t* w = w_.reserve(l.w_q.size());
    uint16_t* bias = bias_.reserve(l.bias.size());
    stager.upload({{a, l.a_q.data(), l.a_q.size_bytes()}, {w, l.w_q.data(), l.w_q.size_bytes()},
                   {bias, l.bias.data(), l.bias.size_bytes()}},
                  on);
    timeline.end(GpuTimeline::uploads, on);
    timeline.begin(GpuTimeline::pristine, on);
    keep_pristine<int8_t>(a, a0_.reserve(l.a_q.size()), l.a_q, on, &hashes);
    keep_pristine<int8_t>(w, w0_.reserve(l.w_q.size()), l.w_q, on, &hashes);
    keep_pristine<uint16_t>(bias, bias0_.reserve(l.bias.size()), l.bias, on, &hashes);
    timeline.end(GpuTimeline::pristine, on);
  }
  // QC_FP8_MODELS_STREAM (on by default since the thirteenth session; =0 off): the next FP8 layer's models on
  // `exact_stream` (idle for an FP8 pair) behind its upload (`upload_done`), and the upload's task done
  // once the bytes are there, as an INT8 layer's exact sums; the runs' stream waits for the models
  // (`exact_done`) when it takes the layer. So the upload after it (on `copy_stream`) goes on beside them
  // instead of behind them: a layer's upload no longer waits for the models of the layer before.
  static bool fp8_models_stream() {
    static const bool on = env_int("QC_FP8_MODELS_STREAM", 1, 0, 1) != 0;
    return on;
  }
  // `exact_stream`, made to wait for what `copy_stream` holds so far (the upload ahead: `upload_done`).
  cudaStream_t behind_upload() {
    QC_CUDA_CHECK(cudaEventRecord(upload_done, copy_stream));
    QC_CUDA_CHECK(cudaStreamWaitEvent(exact_stream, upload_done));
    return exact_stream;
  }
  // True when the layer uploaded ahead is `full` (its buffers then become the current ones).
  bool take_ahead(const LayerOperands& full);
  // Every model of `models` not in `set` yet, into its slot: two that run the same steps (the Hopper pair:
  // cuda_kernels::fp8_accum_models_share_steps) in one launch, the others one by one.
  void evaluate_all(const std::vector<NamedAccumModel>& models, const Fp8Gemm& codes, DeviceScratch<uint8_t>& wt,
                    DeviceScratch<float>& state, ModelSet& set, cudaStream_t on);
  // A model's fp32 accumulators of codes a [m,k], w [n,k] (device), enqueued on `on`.
  void evaluate(const Fp8AccumModel& model, const Fp8Gemm& codes, DeviceScratch<uint8_t>& wt,
                DeviceScratch<float>& state, float* d, cudaStream_t on, std::string* kernel);
  void zero(void* p, size_t bytes) const {
    if (bytes != 0) QC_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream));
  }
  void begin_pass(double near_zero_fraction);
  void zero_counts();
  GpuPassCounts finish_pass(bool run);
  // The rows' bytes of each array [m, n] (device), one array after the other, on their way into `into` on the
  // stream (not waited for): where each array starts in it.
  std::vector<size_t> gather(const std::vector<int64_t>& rows, const std::vector<std::pair<const void*, int>>& arrays,
                             PinnedBytes& into);
  // Pinned landing places for listed rows that come back behind their run, each with the event that says
  // they are there; one is free again once its holder lets it go.
  struct StagedRows {
    PinnedBytes bytes;
    cudaEvent_t done = nullptr;
    StagedRows() { QC_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming)); }
    ~StagedRows() { cudaEventDestroy(done); }
    StagedRows(const StagedRows&) = delete;
    StagedRows& operator=(const StagedRows&) = delete;
  };
  std::vector<std::shared_ptr<StagedRows>> staged_pool;
  template <class Unpack>
  std::function<GpuRows()> behind(const std::vector<int64_t>& rows, const std::vector<std::pair<const void*, int>>& arrays,
                                  Unpack unpack);
  std::shared_ptr<StagedRows> free_staged() {
    for (const auto& p : staged_pool) {
      if (p.use_count() == 1) {
        // Let go of by its holder; if that one never waited (a run that threw), its copy may still be landing.
        std::atomic_thread_fence(std::memory_order_acquire);
        QC_CUDA_CHECK(cudaEventSynchronize(p->done));
        return p;
      }
    }
    return staged_pool.emplace_back(std::make_shared<StagedRows>());
  }
};

// The device is asked for first: the pinned slots of `Impl` need one.
GpuVerifyLayer::GpuVerifyLayer()
    : impl_((cuda::require_device("verify's device pipeline"), std::make_unique<Impl>())) {
  // The runs' stream (the arms, C3, the element pass) ahead of the next layer's (its upload and its FP8
  // models): the block scheduler gives the runs' kernels the multiprocessors the models' blocks free as
  // they finish, instead of queueing them behind the models' whole grids. Scheduling only: what each
  // kernel computes is the same.
  int least = 0, greatest = 0;
  QC_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  QC_CUDA_CHECK(cudaStreamCreateWithPriority(&impl_->stream, cudaStreamNonBlocking, greatest));
  QC_CUDA_CHECK(cudaStreamCreateWithPriority(&impl_->copy_stream, cudaStreamNonBlocking, least));
  QC_CUDA_CHECK(cudaStreamCreateWithPriority(&impl_->exact_stream, cudaStreamNonBlocking, least));
  for (cudaEvent_t* e : {&impl_->ahead_done, &impl_->previous_done, &impl_->upload_done, &impl_->exact_done}) {
    QC_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
}

GpuVerifyLayer::~GpuVerifyLayer() {
  if (!impl_) return;
  impl_->open_gate();
  if (impl_->ahead_task.valid()) impl_->ahead_task.wait();
  for (cudaStream_t s : {impl_->stream, impl_->copy_stream, impl_->exact_stream}) {
    if (s == nullptr) continue;
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  for (cudaEvent_t e : {impl_->ahead_done, impl_->previous_done, impl_->upload_done, impl_->exact_done}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
}

void GpuVerifyLayer::prefetch(const LayerOperands& next, const std::vector<NamedAccumModel>& models, bool only_untaken) {
  Impl& x = *impl_;
  x.open_gate();
  if (x.ahead_task.valid()) x.ahead_task.get();
  if (!refusal(next, x.fp8).empty()) return;  // in the pair's mode, which the loaded layer has
  if (next.fp8() && Impl::models_after() > 0) {
    const std::lock_guard<std::mutex> lock(x.gate_mu);
    x.gate_open = false;
  }
  x.ahead.host[0] = x.ahead.host[1] = x.ahead.host[2] = nullptr;
  x.ahead.models.ready.clear();
  // A layer uploaded ahead and not taken: its exact sums read h.a, h.w, which this upload writes.
  // (likewise an FP8 layer's models on `exact_stream`, QC_FP8_MODELS_STREAM)
  const bool wait_exact = (Impl::exact_beside() && (x.ahead.has_exact || !only_untaken)) || x.ahead.models_pending;
  x.ahead.has_exact = false;
  x.ahead.models_pending = false;
  x.ahead_task = std::async(std::launch::async, [&x, next, models, wait_exact] {
    const auto t0 = std::chrono::steady_clock::now();
    Impl::Ahead& h = x.ahead;
    QC_CUDA_CHECK(cudaStreamWaitEvent(x.copy_stream, x.previous_done));
    if (wait_exact) QC_CUDA_CHECK(cudaStreamWaitEvent(x.copy_stream, x.exact_done));
    x.timeline.begin(GpuTimeline::uploads, x.copy_stream);
    x.upload_layer(next, h.a, h.a0, h.w, h.w0, h.bias, h.bias0, x.copy_stream, h.leaves);
    // The models after the upload (and the gate): on the same stream, or on `exact_stream` behind it
    // (QC_FP8_MODELS_STREAM; the buffers they write were the previous layer's, which the upload's stream
    // waited for above: `previous_done`).
    if (next.fp8()) {  // (an INT8 layer has no FP8 formats to name)
      x.wait_gate();
      const Fp8Gemm codes{reinterpret_cast<const uint8_t*>(h.a.get()), fp8_format(next.a_type),
                          reinterpret_cast<const uint8_t*>(h.w.get()), fp8_format(next.w_type), {next.m, next.n, next.k}};
      const cudaStream_t on = Impl::fp8_models_stream() ? x.behind_upload() : x.copy_stream;
      x.timeline.begin(GpuTimeline::models, on);
      x.evaluate_all(models, codes, h.wt, h.model_state, h.models, on);
      x.timeline.end(GpuTimeline::models, on);
      if (on == x.exact_stream) {
        QC_CUDA_CHECK(cudaEventRecord(x.exact_done, x.exact_stream));
        h.models_pending = true;
      }
    } else if (Impl::exact_beside()) {  // an INT8 layer's exact accumulators and C2's statistics beside the uploads
      exact_and_range(h.a.get(), h.w.get(), next.m, next.n, next.k, h.exact, h.range, h.range_host.get(), x.behind_upload());
      QC_CUDA_CHECK(cudaEventRecord(x.exact_done, x.exact_stream));
      h.has_exact = true;
    } else {  // likewise after the upload, beside the runs
      exact_and_range(h.a.get(), h.w.get(), next.m, next.n, next.k, h.exact, h.range, h.range_host.get(), x.copy_stream);
      h.has_exact = true;
    }
    QC_CUDA_CHECK(cudaEventRecord(x.ahead_done, x.copy_stream));
    QC_CUDA_CHECK(cudaEventSynchronize(x.ahead_done));
    h.leaves.give();
    h.host[0] = next.a_q.data(), h.host[1] = next.w_q.data(), h.host[2] = next.bias.data();
    h.bytes[0] = next.a_q.size(), h.bytes[1] = next.w_q.size(), h.bytes[2] = next.bias.size();
    h.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
}

void GpuVerifyLayer::runs_launched(int runs) {
  if (runs >= Impl::models_after()) impl_->open_gate();
}

bool GpuVerifyLayer::Impl::take_ahead(const LayerOperands& full) {
  open_gate();
  if (ahead_task.valid()) ahead_task.get();  // rethrows what the upload threw
  const void* host[3] = {full.a_q.data(), full.w_q.data(), full.bias.data()};
  const size_t bytes[3] = {full.a_q.size(), full.w_q.size(), full.bias.size()};
  for (int i = 0; i < 3; ++i) {
    if (ahead.host[i] != host[i] || ahead.bytes[i] != bytes[i]) return false;
  }
  std::swap(a, ahead.a), std::swap(a0, ahead.a0), std::swap(w, ahead.w), std::swap(w0, ahead.w0);
  std::swap(bias_now, ahead.bias), std::swap(bias0, ahead.bias0);
  std::swap(models, ahead.models);
  ahead.models.ready.clear();
  if (ahead.models_pending) {  // the runs' stream behind them
    QC_CUDA_CHECK(cudaStreamWaitEvent(stream, exact_done));
    ahead.models_pending = false;
  }
  if (ahead.has_exact) {  // done (the upload's task waited for its stream), or waited for by the runs' stream
    if (exact_beside()) QC_CUDA_CHECK(cudaStreamWaitEvent(stream, exact_done));
    std::swap(exact, ahead.exact);
    range_host.swap(ahead.range_host);  // read by `range_stats` once the runs' stream is done
    exact_ahead = true;
    ahead.has_exact = false;
  }
  ahead.host[0] = ahead.host[1] = ahead.host[2] = nullptr;
  ahead_seconds += ahead.seconds;
  return true;
}

std::string GpuVerifyLayer::refusal(const LayerOperands& full, bool fp8) {
  if (!fp8 && full.fp8()) return "an FP8 layer (the pair is INT8)";
  if (fp8 && !full.fp8()) return "an INT8 layer (the FP8 arms' re-encoded codes stay on the host's pipeline)";
  if (fp8 && full.block_scaled()) return "a block-scaled layer (the host's pipeline runs the block models)";
  if (!fp8 && full.k > kAccumMaxKInt32) return fmt::format("K = {} is beyond the int32 accumulators' proof", full.k);
  if (full.n % 8 != 0 || full.n <= 0) return fmt::format("N = {} is not a positive multiple of 8", full.n);
  if (full.m * full.n >= (int64_t{1} << 32) || full.m > 65535 || full.n > INT_MAX || full.k > INT_MAX) {
    return fmt::format("{}x{}x{} is beyond the pass's indices", full.m, full.n, full.k);
  }
  return "";
}

void GpuVerifyLayer::load(const LayerOperands& full, const std::vector<NamedAccumModel>& models) {
  Impl& x = *impl_;
  const std::string why = refusal(full, full.fp8());
  QC_CHECK(why.empty(), "GpuVerifyLayer::load: layer `{}`: {}", full.name, why);
  QC_CUDA_CHECK(cudaEventRecord(x.previous_done, x.stream));
  x.models.ready.clear();  // until the layer's own are taken or made (a throw below leaves none named)
  x.m_full = full.m, x.n = full.n, x.k = full.k, x.bias = full.has_bias();
  x.fp8 = full.fp8();
  x.exact_ahead = false;
  if (!x.take_ahead(full)) {
    x.timeline.begin(GpuTimeline::uploads, x.stream);
    x.upload_layer(full, x.a, x.a0, x.w, x.w0, x.bias_now, x.bias0, x.stream, x.leaves);
    x.sync();  // the leaves' landing places (the layers after this one are uploaded ahead, beside the runs)
    x.leaves.give();
  }
  if (x.fp8) {
    x.fa = fp8_format(full.a_type), x.fw = fp8_format(full.w_type);
    const Fp8Gemm codes{reinterpret_cast<const uint8_t*>(x.a.get()), x.fa, reinterpret_cast<const uint8_t*>(x.w.get()),
                        x.fw, {full.m, full.n, full.k}};
    x.timeline.begin(GpuTimeline::models, x.stream);
    x.evaluate_all(models, codes, x.wt, x.model_state, x.models, x.stream);  // none when taken ahead with the layer
    x.timeline.end(GpuTimeline::models, x.stream);
    return;
  }
  if (!x.exact_ahead) exact_and_range(x.a.get(), x.w.get(), full.m, full.n, full.k, x.exact, x.range, x.range_host.get(), x.stream);
}

RangeStats GpuVerifyLayer::range_stats() {
  Impl& x = *impl_;
  x.sync();
  const cuda_kernels::RangeCounts& c = *x.range_host.get();
  RangeParts p;
  p.max_abs = static_cast<int64_t>(c.max_key >> 32);
  p.argmax = static_cast<int64_t>(0xFFFFFFFFull - (c.max_key & 0xFFFFFFFFull));
  p.above = static_cast<int64_t>(c.above);
  p.inexact = static_cast<int64_t>(c.inexact);
  p.a_contains_min = c.a_has_min != 0;
  p.l1_max = static_cast<int64_t>(c.l1_key >> 32);
  p.l1_argmax = static_cast<int64_t>(0xFFFFFFFFull - (c.l1_key & 0xFFFFFFFFull));
  return range_stats_from({x.m_full, x.n, x.k}, p);
}

ResidentOperands GpuVerifyLayer::operands(const LayerOperands& ops) {
  Impl& x = *impl_;
  QC_CHECK(ops.n == x.n && ops.k == x.k && ops.m <= x.m_full && ops.has_bias() == x.bias,
           "GpuVerifyLayer::operands: layer `{}` {}x{}x{} is not the loaded one", ops.name, ops.m, ops.n, ops.k);
  x.m = ops.m;
  x.timeline.begin(GpuTimeline::runs, x.stream, /*unless_open=*/true);
  x.copy_to_device(x.sa, x.sa0, ops.a_scale);
  x.copy_to_device(x.sw, x.sw0, ops.w_scale);
  ResidentOperands r;
  r.host = &ops;
  r.a = x.a.get(), r.w = x.w.get(), r.a_scale = x.sa.get(), r.w_scale = x.sw.get();
  r.bias = x.bias ? x.bias_now.get() : nullptr;
  r.stream = x.stream;
  return r;
}

ResidentOutputs GpuVerifyLayer::outputs(int side, bool acc) {
  Impl& x = *impl_;
  const size_t mn = static_cast<size_t>(x.m * x.n);
  QC_CUDA_CHECK(cudaMemsetAsync(x.y[side].reserve(mn), 0xFF, mn * sizeof(uint16_t), x.stream));
  x.has_acc[side] = acc;
  if (acc) QC_CUDA_CHECK(cudaMemsetAsync(x.acc[side].reserve(mn), 0xFF, mn * sizeof(int32_t), x.stream));
  return {x.y[side].get(), acc ? x.acc[side].get() : nullptr};
}

void GpuVerifyLayer::check_operands(int side) {
  Impl& x = *impl_;
  cuda_kernels::BytePieces p;
  const auto add = [&](const void* now, const void* was, size_t bytes) {
    p.now[p.count] = static_cast<const unsigned char*>(now);
    p.was[p.count] = static_cast<const unsigned char*>(was);
    p.bytes[p.count] = bytes;
    ++p.count;
  };
  add(x.a.get(), x.a0.get(), static_cast<size_t>(x.m * x.k));  // the rows the arms took
  add(x.sa.get(), x.sa0.get(), static_cast<size_t>(x.m) * sizeof(float));
  add(x.sw.get(), x.sw0.get(), static_cast<size_t>(x.n) * sizeof(float));
  add(x.bias_now.get(), x.bias0.get(), x.bias ? static_cast<size_t>(x.n) * sizeof(uint16_t) : 0);
  add(x.w.get(), x.w0.get(), static_cast<size_t>(x.n * x.k));
  static constexpr int kElementSize[kPieces] = {1, 4, 4, 2, 1};
  unsigned long long* first = x.first_diff.reserve(2 * kPieces) + side * kPieces;
  cuda_kernels::OperandDiff* diff = x.diffs.reserve(2) + side;
  const char* who = "verify's device pipeline: C3";
  QC_CUDA_CHECK(cudaMemsetAsync(first, 0xFF, kPieces * sizeof(unsigned long long), x.stream));
  cuda::checked_launch(cuda_kernels::launch_first_byte_diff(p, first, x.stream), who);
  cuda::checked_launch(cuda_kernels::launch_capture_diff(p, kElementSize, first, diff, x.stream), who);
}

namespace {

const char* const kPassWho = "verify's device pipeline: the element pass";

}  // namespace

// The comparison's near-zero limit over arm A's outputs (the host's rule, from the same exact sum), and
// the pass's counters zeroed: what every element pass starts with.
void GpuVerifyLayer::Impl::begin_pass(double near_zero_fraction) {
  const size_t mn = static_cast<size_t>(m * n);
  Bf16SquareSum* sum = square_sum.reserve(1);
  zero(sum, sizeof(*sum));
  cuda::checked_launch(cuda_kernels::launch_square_sum(y[0].get(), static_cast<int64_t>(mn), sum, stream), kPassWho);
  cuda::checked_launch(cuda_kernels::launch_near_zero_bits(sum, near_zero_fraction, near_limit.reserve(1),
                                                           near_bits.reserve(1), stream),
                       kPassWho);
  zero_counts();
}

void GpuVerifyLayer::Impl::zero_counts() {
  zero(counts.reserve(1), sizeof(cuda_kernels::PassCounts));
  zero(large_hist.reserve(cuda_kernels::kLargeHist), cuda_kernels::kLargeHist * sizeof(unsigned long long));
  const size_t row_bytes = static_cast<size_t>(m) * cuda_kernels::kRowCounters * sizeof(unsigned);
  zero(row_counts.reserve(row_bytes / sizeof(unsigned)), row_bytes);
}

// The counts of a pass back on the host (the run's one wait): the counters, the histogram, the rows'
// counts; for a run's pass also the near-zero limit and C3's findings after each arm.
GpuPassCounts GpuVerifyLayer::Impl::finish_pass(bool run) {
  const auto back = [&](void* host, const void* device, size_t bytes) {
    QC_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
  };
  back(counts_host.get(), counts.get(), sizeof(cuda_kernels::PassCounts));
  GpuPassCounts r;
  r.rows.resize(static_cast<size_t>(m) * cuda_kernels::kRowCounters);
  back(r.rows.data(), row_counts.get(), r.rows.size() * sizeof(unsigned));
  if (run) {
    back(near_limit_host.get(), near_limit.get(), sizeof(double));
    back(diffs_host.get(), diffs.reserve(2), 2 * sizeof(cuda_kernels::OperandDiff));
  }
  timeline.end(GpuTimeline::runs, stream);
  sync();
  for (int side = 0; run && side < 2; ++side) {
    const cuda_kernels::OperandDiff& d = (*diffs_host.get())[static_cast<size_t>(side)];
    if (d.piece < 0) continue;
    OperandChange& c = r.changed[side].emplace();
    c.piece = d.piece;
    c.element = static_cast<int64_t>(d.element);
    std::memcpy(c.was.data(), d.was, sizeof(d.was));
    std::memcpy(c.now.data(), d.now, sizeof(d.now));
  }
  const cuda_kernels::PassCounts& c = *counts_host.get();
  for (int i = 0; i < cuda_kernels::kPassCounters; ++i) r.count[static_cast<size_t>(i)] = static_cast<int64_t>(c.count[i]);
  r.max_ulp = static_cast<int64_t>(c.max_ulp);
  if (run) r.near_zero_limit = *near_limit_host.get();
  std::memcpy(&r.max_rel, &c.max_rel_bits, sizeof(double));
  std::memcpy(&r.near_zero_max_abs, &c.near_zero_max_abs_bits, sizeof(double));
  for (int d = 0; d < cuda_kernels::kSmallUlps; ++d) {
    if (c.small_hist[d] != 0) r.ulp_histogram[d] = static_cast<int64_t>(c.small_hist[d]);
  }
  if (c.count[cuda_kernels::kLargeUlps] != 0) {
    std::vector<unsigned long long> hist(cuda_kernels::kLargeHist);
    QC_CUDA_CHECK(cudaMemcpy(hist.data(), large_hist.get(), hist.size() * sizeof(unsigned long long),
                             cudaMemcpyDeviceToHost));
    for (size_t d = cuda_kernels::kSmallUlps; d < hist.size(); ++d) {
      if (hist[d] != 0) r.ulp_histogram[static_cast<int64_t>(d)] = static_cast<int64_t>(hist[d]);
    }
  }
  return r;
}

GpuPassCounts GpuVerifyLayer::pass(const GpuPassSpec& spec) {
  Impl& x = *impl_;
  const int m = static_cast<int>(x.m), n = static_cast<int>(x.n);
  const size_t mn = static_cast<size_t>(x.m * x.n);
  cuda_kernels::Int8PassArgs args;
  args.exact = x.exact.get();  // the first m rows of the layer's
  for (int s = 0; s < 2; ++s) {
    args.y[s] = x.y[s].get();
    QC_CHECK(spec.acc[s] == x.has_acc[s], "GpuVerifyLayer::pass: arm {}'s accumulator was {}taken", s, x.has_acc[s] ? "" : "not ");
    args.acc[s] = spec.acc[s] ? x.acc[s].get() : nullptr;
    if (const Epilogue* e = spec.formula[s]) {
      QC_CHECK(gpu_pass_takes(*e), "GpuVerifyLayer::pass: formula `{}` has no device instance", e->name);
      cuda::checked_launch(cuda_kernels::launch_int32_scaled_epilogue(
                               x.exact.get(), x.sa.get(), x.sw.get(), x.bias ? x.bias_now.get() : nullptr,
                               x.f[s].reserve(mn), m, n, formula::instance_kind(e->kind, m, n), e->bias_mode, x.stream),
                           kPassWho);
      args.f[s] = x.f[s].get();
    }
  }
  x.begin_pass(spec.near_zero_fraction);
  args.sa = x.sa.get(), args.sw = x.sw.get();
  args.m = m, args.n = n;
  args.safe = spec.safe, args.pow2 = spec.pow2;
  args.near_bits = x.near_bits.get();
  cuda::checked_launch(
      cuda_kernels::launch_int8_element_pass(args, x.counts.get(), x.large_hist.get(), x.row_counts.get(), x.stream),
      kPassWho);
  return x.finish_pass(/*run=*/true);
}

const float* GpuVerifyLayer::model(const std::string& name, const Fp8AccumModel& model, std::string* kernel) {
  Impl& x = *impl_;
  QC_CHECK(x.fp8, "GpuVerifyLayer::model: the loaded layer is not FP8");
  if (const float* d = x.models.find(name)) return d;
  float* d = x.models.slot(name, static_cast<size_t>(x.m_full * x.n));
  const Fp8Gemm codes{reinterpret_cast<const uint8_t*>(x.a.get()), x.fa, reinterpret_cast<const uint8_t*>(x.w.get()),
                      x.fw, {x.m_full, x.n, x.k}};
  x.evaluate(model, codes, x.wt, x.model_state, d, x.stream, kernel);
  x.models.ready.insert(name);
  return d;
}

void GpuVerifyLayer::Impl::evaluate(const Fp8AccumModel& model, const Fp8Gemm& codes, DeviceScratch<uint8_t>& wt,
                                    DeviceScratch<float>& state, float* d, cudaStream_t on, std::string* kernel) {
  const AccumShape& s = codes.s;
  validate_fp8_model_for(model, s);
  const std::string ran = cuda::checked_launch(
      cuda_kernels::launch_fp8_accum_model(model, codes.a, codes.a_format, codes.w, codes.w_format,
                                           wt.reserve(static_cast<size_t>(s.n * s.k)), d, static_cast<int>(s.m),
                                           static_cast<int>(s.n), s.k, /*allow_fp32=*/true, /*reference_kernel=*/false, on,
                                           launches(state, 1, s)),
      "verify's device pipeline: an accumulation model");
  if (kernel != nullptr) *kernel = ran;
}

void GpuVerifyLayer::Impl::evaluate_all(const std::vector<NamedAccumModel>& models, const Fp8Gemm& codes,
                                        DeviceScratch<uint8_t>& wt, DeviceScratch<float>& state, ModelSet& set,
                                        cudaStream_t on) {
  const AccumShape& s = codes.s;
  const size_t mn = static_cast<size_t>(s.m * s.n);
  std::vector<const NamedAccumModel*> left;
  for (const NamedAccumModel& m : models) {
    if (set.ready.count(m.name) == 0 && std::none_of(left.begin(), left.end(), [&](auto* l) { return l->name == m.name; }))
      left.push_back(&m);
  }
  std::vector<bool> done(left.size(), false);
  for (size_t i = 0; i < left.size(); ++i) {
    for (size_t j = i + 1; j < left.size() && !done[i]; ++j) {
      if (done[j] || !cuda_kernels::fp8_accum_models_share_steps(left[i]->model, left[j]->model, s.k)) continue;
      validate_fp8_model_for(left[i]->model, s);
      validate_fp8_model_for(left[j]->model, s);
      cuda::checked_launch(cuda_kernels::launch_fp8_accum_model_pair(
                               left[i]->model, left[j]->model, codes.a, codes.a_format, codes.w, codes.w_format,
                               set.slot(left[i]->name, mn), set.slot(left[j]->name, mn), static_cast<int>(s.m),
                               static_cast<int>(s.n), s.k, on, launches(state, 2, s)),
                           "verify's device pipeline: two accumulation models");
      done[i] = done[j] = true;
    }
  }
  for (size_t i = 0; i < left.size(); ++i) {
    if (!done[i]) evaluate(left[i]->model, codes, wt, state, set.slot(left[i]->name, mn), on, nullptr);
    set.ready.insert(left[i]->name);
  }
}

float* GpuVerifyLayer::accumulator(int side) {
  Impl& x = *impl_;
  const size_t mn = static_cast<size_t>(x.m * x.n);
  float* d = x.arm_acc[side].reserve(mn);
  QC_CUDA_CHECK(cudaMemsetAsync(d, 0xFF, mn * sizeof(float), x.stream));
  return d;
}

const float* GpuVerifyLayer::accumulator_of(int side) const { return impl_->arm_acc[side].get(); }

GpuPassCounts GpuVerifyLayer::check_accumulators(const float* const (&want)[2]) {
  Impl& x = *impl_;
  const float* got[2] = {want[0] != nullptr ? x.arm_acc[0].get() : nullptr, want[1] != nullptr ? x.arm_acc[1].get() : nullptr};
  x.zero_counts();
  cuda::checked_launch(cuda_kernels::launch_fp32_accumulator_check(got, want, static_cast<int>(x.m), static_cast<int>(x.n),
                                                                   x.counts.get(), x.row_counts.get(), x.stream),
                       "verify's device pipeline: the exposed accumulators");
  return x.finish_pass(/*run=*/false);
}

GpuPassCounts GpuVerifyLayer::pass_fp8(const GpuFp8PassSpec& spec) {
  Impl& x = *impl_;
  const int m = static_cast<int>(x.m), n = static_cast<int>(x.n);
  const size_t mn = static_cast<size_t>(x.m * x.n);
  cuda_kernels::Fp8PassArgs args;
  const bool both = spec.d[0] != nullptr && spec.d[1] != nullptr;
  for (int s = 0; s < 2; ++s) {
    args.y[s] = x.y[s].get();
    if (spec.d[s] == nullptr) continue;
    const Epilogue* e = spec.formula[s];
    QC_CHECK(e != nullptr && gpu_pass_takes(*e), "GpuVerifyLayer::pass_fp8: arm {}'s epilogue has no device instance", s);
    cuda::checked_launch(cuda_kernels::launch_f32_scale_to_bf16(spec.d[s], x.sa.get(), x.sw.get(), x.f[s].reserve(mn),
                                                                m, n, formula::instance_kind(e->kind, m, n), x.stream),
                         kPassWho);
    args.want[s] = x.f[s].get();
    if (both) args.key[s] = spec.d[s];
  }
  x.begin_pass(spec.near_zero_fraction);
  args.m = m, args.n = n;
  args.pow2 = spec.pow2;
  args.near_bits = x.near_bits.get();
  cuda::checked_launch(
      cuda_kernels::launch_fp8_element_pass(args, x.counts.get(), x.large_hist.get(), x.row_counts.get(), x.stream),
      kPassWho);
  return x.finish_pass(/*run=*/true);
}

// `arrays` ([m, n], each with its element size) at `rows`, gathered on the device into one staging area
// and copied in one transfer into `into`, enqueued on the stream; the caller waits before it reads them.
std::vector<size_t> GpuVerifyLayer::Impl::gather(const std::vector<int64_t>& rows,
                                                 const std::vector<std::pair<const void*, int>>& arrays, PinnedBytes& into) {
  for (const int64_t row : rows) QC_CHECK(row >= 0 && row < m, "GpuVerifyLayer::rows: row {} of {}", row, m);
  QC_CHECK(arrays.size() <= static_cast<size_t>(cuda_kernels::kMaxGather), "GpuVerifyLayer::rows: {} arrays", arrays.size());
  const size_t count = rows.size(), cols = static_cast<size_t>(n);
  cuda_kernels::RowGather g;
  std::vector<size_t> at;
  size_t offset = 0;
  for (const auto& [src, bytes] : arrays) {
    QC_CHECK(src != nullptr, "GpuVerifyLayer::rows: array {} is not on the device", g.arrays);
    g.src[g.arrays] = static_cast<const unsigned char*>(src);
    g.bytes[g.arrays] = bytes;
    at.push_back(offset);
    offset += count * cols * static_cast<size_t>(bytes);
    ++g.arrays;
  }
  if (count == 0 || offset == 0) return at;
  unsigned char* staging = gathered.reserve(offset);
  for (int j = 0; j < g.arrays; ++j) g.dst[j] = staging + at[static_cast<size_t>(j)];
  int64_t* ids = row_ids.reserve(count);
  QC_CUDA_CHECK(cudaMemcpyAsync(ids, rows.data(), count * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
  cuda::checked_launch(cuda_kernels::launch_gather_rows(g, ids, static_cast<int>(count), n, stream),
                       "verify's device pipeline: the listed rows");
  QC_CUDA_CHECK(cudaMemcpyAsync(into.reserve(offset), staging, offset, cudaMemcpyDeviceToHost, stream));
  return at;
}

namespace {

template <class T>
std::vector<T> staged_array(const PinnedBytes& staged, size_t at, size_t count) {
  std::vector<T> v(count);
  if (count != 0) std::memcpy(v.data(), staged.data() + at, count * sizeof(T));
  return v;
}

}  // namespace

// `arrays` at `rows` gathered behind the stream's work into a free pinned landing place; the function
// returned waits for them there and gives `unpack(bytes, where each array starts, elements per array)`.
template <class Unpack>
std::function<GpuRows()> GpuVerifyLayer::Impl::behind(const std::vector<int64_t>& rows,
                                                      const std::vector<std::pair<const void*, int>>& arrays, Unpack unpack) {
  std::shared_ptr<StagedRows> into = free_staged();
  const std::vector<size_t> at = gather(rows, arrays, into->bytes);
  QC_CUDA_CHECK(cudaEventRecord(into->done, stream));
  const size_t count = rows.size() * static_cast<size_t>(n);
  return [into = std::move(into), at, count, unpack] {
    QC_CUDA_CHECK(cudaEventSynchronize(into->done));
    return unpack(into->bytes, at, count);
  };
}

std::function<GpuRows()> GpuVerifyLayer::rows(const std::vector<int64_t>& rows, bool acc_a, bool acc_b) {
  Impl& x = *impl_;
  std::vector<std::pair<const void*, int>> arrays = {{x.y[0].get(), 2}, {x.y[1].get(), 2}, {x.exact.get(), 4}};
  if (acc_a) arrays.emplace_back(x.acc[0].get(), 4);
  if (acc_b) arrays.emplace_back(x.acc[1].get(), 4);
  return x.behind(rows, arrays, [acc_a, acc_b](const PinnedBytes& bytes, const std::vector<size_t>& at, size_t count) {
    GpuRows r;
    size_t j = 0;
    for (int s = 0; s < 2; ++s) r.y[s] = staged_array<uint16_t>(bytes, at[j++], count);
    r.exact = staged_array<int32_t>(bytes, at[j++], count);
    if (acc_a) r.acc[0] = staged_array<int32_t>(bytes, at[j++], count);
    if (acc_b) r.acc[1] = staged_array<int32_t>(bytes, at[j++], count);
    return r;
  });
}

std::function<GpuRows()> GpuVerifyLayer::rows_fp8(const std::vector<int64_t>& rows, const float* const (&f32)[6],
                                                  bool outputs) {
  Impl& x = *impl_;
  std::vector<std::pair<const void*, int>> arrays;
  if (outputs) arrays = {{x.y[0].get(), 2}, {x.y[1].get(), 2}};
  bool has[6];
  for (int i = 0; i < 6; ++i) {
    has[i] = f32[i] != nullptr;
    if (has[i]) arrays.emplace_back(f32[i], 4);
  }
  return x.behind(rows, arrays, [outputs, has = std::to_array(has)](const PinnedBytes& bytes, const std::vector<size_t>& at,
                                                                     size_t count) {
    GpuRows r;
    size_t j = 0;
    for (int s = 0; s < 2 && outputs; ++s) r.y[s] = staged_array<uint16_t>(bytes, at[j++], count);
    for (int i = 0; i < 6; ++i) {
      if (has[i]) r.f32[i] = staged_array<float>(bytes, at[j++], count);
    }
    return r;
  });
}

GpuVerifyLayer::UploadSeconds GpuVerifyLayer::take_upload_seconds() {
  const PinnedStager::Work work = impl_->stager.take_work();
  return {std::exchange(impl_->ahead_seconds, 0.0), work.reading, work.waiting};
}

}  // namespace qc
