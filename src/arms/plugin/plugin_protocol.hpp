// The wire protocol between an isolated plugin arm (`plugin:<path.so>`, plugin_arm.cpp) and its
// worker process, `qconform-plugin-host` (host/plugin_host.cpp). Both sides include this header;
// the host links nothing else of qconform.
//
// The worker is started with posix_spawn (exec, never a bare fork of a threaded process) as
//   qconform-plugin-host <kProtocolVersion> <canonical path of the .so> <parent pid>
// with three descriptors in place:
//   fd 3 (kSocketFd)  a SOCK_STREAM unix socket: requests in, replies out;
//   fd 4 (kInputsFd)  the operand memfd, opened read-only (O_RDONLY): the worker can map it
//                     PROT_READ only, and mprotect() cannot make that mapping writable;
//   fd 5 (kOutputsFd) the output memfd, read-write.
// The worker's stdout is qconform's stderr (qconform's stdout stays the human summary).
//
// Messages are fixed-size structs in host byte order (both sides are the same build), each
// starting with `kMagic` and a `MessageType`; Hello and LoadError are followed by their strings.
// One request is in flight at a time. The worker answers a Run request with Done (carrying the sum
// of the output buffers as `run` left them), then, after a grace period in which a thread the
// plugin left running could still write, with Settled; when the plugin faults on SIGSEGV/SIGBUS
// (during `run` or in the grace period) it sends Fault (from the signal handler) instead and dies.
// qconform compares the inputs and outputs it sees after Done and again after Settled: a write
// after `run` returned is the arm's failure.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qc::plugin_protocol {

inline constexpr uint32_t kProtocolVersion = 4;  // 2: FP8 plugins (Hello's model, RunRequest::d); 3: Settled; 4: block scales
inline constexpr uint32_t kMagic = 0x51435048;  // "QCPH"
inline constexpr int kSocketFd = 3;
inline constexpr int kInputsFd = 4;
inline constexpr int kOutputsFd = 5;
inline constexpr uint64_t kNone = ~uint64_t{0};  // an absent offset (no bias, no accumulator)
inline constexpr size_t kErrorBufferSize = 4096;  // the plugin's `error` buffer
inline constexpr size_t kMaxString = 1 << 16;     // longest name/epilogue/load error accepted
inline constexpr int kExitHostUsage = 64;         // the host's own exit codes: started by hand
inline constexpr int kExitHostProtocol = 65;      // a request it cannot serve (it prints why)

enum class MessageType : uint32_t {
  hello = 1,       // worker -> parent after loading: the descriptor's fields (then name, epilogue)
  load_error = 2,  // worker -> parent: the library could not be loaded (then the message)
  run = 3,         // parent -> worker: one layer
  done = 4,        // worker -> parent: `run` returned
  fault = 5,       // worker -> parent: SIGSEGV/SIGBUS inside `run`, the worker dies next
  settled = 6,     // worker -> parent: the grace period after Done passed without a fault
};

// The grace period after `run` returns: a quarter of the call's time, at least 1 ms, at most 50 ms.
inline constexpr double kGraceMinSeconds = 0.001;
inline constexpr double kGraceMaxSeconds = 0.050;

struct Header {
  uint32_t magic;
  MessageType type;
};

// What the worker read from the library. The parent validates it (same messages as the
// in-process loader): the worker reports, it never decides.
struct Hello {
  Header h;
  uint32_t protocol_version;
  uint32_t abi_version;
  uint32_t struct_size;
  uint32_t has_name;      // `name` non-NULL (it may still be empty)
  uint32_t has_epilogue;  // `epilogue` non-NULL
  uint32_t has_run;       // `run` non-NULL
  uint64_t flags;
  uint64_t name_size;      // bytes of `name` that follow (no NUL)
  uint64_t epilogue_size;  // bytes of `epilogue` that follow
  uint32_t has_model;      // `accumulation_model` present (struct_size covers it) and non-NULL
  uint32_t reserved;
  uint64_t model_size;     // bytes of `accumulation_model` that follow the epilogue
  int64_t block_k, block_n;  // the descriptor's block fields (0 when struct_size does not cover them)
};

enum class LoadFailure : uint32_t { dlopen = 1, no_symbol = 2, entry_null = 3, protocol = 4 };

struct LoadError {
  Header h;
  LoadFailure what;
  uint32_t reserved;
  uint64_t message_size;  // bytes that follow
};

// One call of the plugin's `run`. Offsets are bytes into the two mappings, whose sizes the
// worker re-maps whenever they change.
struct RunRequest {
  Header h;
  uint32_t reserved;
  uint32_t reserved2;
  int64_t m, n, k;
  uint64_t inputs_size, outputs_size;
  uint64_t a_q, a_scale, w_q, w_scale, bias;   // offsets into the inputs (bias: kNone when absent)
  uint64_t y, acc, acc_written, error;         // offsets into the outputs (acc: kNone when not wanted)
  uint64_t guards[3];                          // offsets of the inaccessible pages (one page each)
  uint64_t d;  // FP8 calls: offset of d [m,n] fp32 in the outputs (a_q, w_q: the codes; the other
               // operands and y, acc: kNone); kNone on INT8 calls
  // Block-scaled FP8 calls (d set, block_k > 0): a_scale [m, a_scale_cols] and w_scale
  // [ceil(n / w_block_rows), w_scale_cols] fp32 in the inputs; 0 on every other call.
  int64_t block_k, a_scale_cols, w_block_rows, w_scale_cols;
};

struct Done {
  Header h;
  int32_t rc;  // what `run` returned
  uint32_t reserved;
  uint64_t outputs_sum;  // `outputs_sum` of the outputs mapping when `run` returned
};

struct Settled {
  Header h;
};

// A 64-bit sum (FNV-1a over 8-byte words) of `bytes` bytes at `p`: both sides compute it the same
// way, to tell whether the outputs changed between the worker's look and qconform's copy.
inline uint64_t sum_bytes(const char* p, uint64_t bytes, uint64_t h = 14695981039346656037ull) {
  uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < bytes; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

// The sum of every buffer a call's outputs hold (error, acc_written, y or d, acc), never the guard
// pages (inaccessible in the worker).
inline uint64_t outputs_sum(const char* base, const RunRequest& q) {
  const uint64_t mn = static_cast<uint64_t>(q.m) * static_cast<uint64_t>(q.n);
  uint64_t h = sum_bytes(base + q.error, kErrorBufferSize);
  h = sum_bytes(base + q.acc_written, sizeof(int), h);
  if (q.d != kNone) h = sum_bytes(base + q.d, 4 * mn, h);
  if (q.y != kNone) h = sum_bytes(base + q.y, 2 * mn, h);
  if (q.acc != kNone) h = sum_bytes(base + q.acc, 4 * mn, h);
  return h;
}

enum class FaultRegion : uint32_t { elsewhere = 0, inputs = 1, guard = 2 };

struct Fault {
  Header h;
  int32_t signo;
  int32_t code;  // si_code
  FaultRegion region;
  uint32_t guard_index;  // region guard: which of RunRequest::guards
  uint64_t offset;       // region inputs: byte offset into the inputs; elsewhere: the address
};

}  // namespace qc::plugin_protocol
