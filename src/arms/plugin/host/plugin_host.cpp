// qconform-plugin-host: the worker process of an isolated plugin arm (`plugin:<path.so>`).
//
// It loads one plugin library, reports the descriptor's fields, then runs the plugin's `run` on
// request, over the protocol of src/arms/plugin/plugin_protocol.hpp. Whatever the plugin does
// here (crash, abort, hang, exit, write into its inputs) ends this process, never qconform;
// qconform reports it as the arm's failure. It decides nothing about the plugin's validity:
// the parent validates what it reports, with the same messages as the in-process loader.
//
// Started only by qconform (plugin_arm.cpp); by hand it prints its usage and exits 64.
// Deliberately free of qconform's library and of C++ exceptions: nothing here may fail in a
// way that could be mistaken for the plugin's behaviour.
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "arms/plugin/plugin_protocol.hpp"
#include "core/test_hold.hpp"
#include "qconform/arm_abi.h"

namespace {

namespace proto = qc::plugin_protocol;

constexpr int kExitUsage = proto::kExitHostUsage;
constexpr int kExitProtocol = proto::kExitHostProtocol;

// What the fault handler needs, set before each `run` (plain globals: read in a signal handler).
volatile uintptr_t g_inputs_base = 0;
volatile uint64_t g_inputs_size = 0;
volatile uintptr_t g_guards[3] = {0, 0, 0};
size_t g_page = 4096;

bool write_all(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t w = send(proto::kSocketFd, p, size, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    size -= static_cast<size_t>(w);
  }
  return true;
}

// false on EOF or error before `size` bytes.
bool read_all(void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t r = read(proto::kSocketFd, p, size);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    size -= static_cast<size_t>(r);
  }
  return true;
}

// SIGSEGV/SIGBUS: tell the parent where the fault was, then die of the signal (SA_RESETHAND has
// restored the default action; returning re-executes the faulting access). Only
// async-signal-safe calls: send().
void on_fault(int signo, siginfo_t* info, void*) {
  proto::Fault f{};
  f.h = {proto::kMagic, proto::MessageType::fault};
  f.signo = signo;
  f.code = info->si_code;
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  f.region = proto::FaultRegion::elsewhere;
  f.offset = addr;
  if (g_inputs_base != 0 && addr >= g_inputs_base && addr - g_inputs_base < g_inputs_size) {
    f.region = proto::FaultRegion::inputs;
    f.offset = addr - g_inputs_base;
  }
  for (uint32_t g = 0; g < 3; ++g) {
    if (g_guards[g] != 0 && addr >= g_guards[g] && addr - g_guards[g] < g_page) {
      f.region = proto::FaultRegion::guard;
      f.guard_index = g;
      f.offset = addr - g_guards[g];
    }
  }
  const char* p = reinterpret_cast<const char*>(&f);
  size_t left = sizeof f;
  while (left > 0) {
    const ssize_t w = send(proto::kSocketFd, p, left, MSG_NOSIGNAL);
    if (w <= 0) break;
    p += w;
    left -= static_cast<size_t>(w);
  }
}

void install_fault_handlers() {
  // An alternate stack, so a stack overflow in the plugin's calling thread is still reported.
  static char alt_stack[1 << 16];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

void close_other_descriptors() {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 6u, ~0u, 0u) == 0) return;
#endif
  const long max_fd = sysconf(_SC_OPEN_MAX);
  for (long fd = 6; fd < (max_fd > 0 && max_fd < 65536 ? max_fd : 65536); ++fd) close(static_cast<int>(fd));
}

// Ends this process, and every process the plugin started in its process group, when qconform
// is gone (its end of the socket hangs up, or this process was re-parented), even while the
// plugin is stuck in `run`: a hung worker never outlives qconform.
void start_watchdog(pid_t parent) {
  std::thread([parent] {
    for (;;) {
      pollfd p{proto::kSocketFd, 0, 0};
      const int r = poll(&p, 1, 250);
      if ((r > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) || getppid() != parent) {
        if (getpgrp() == getpid()) kill(0, SIGKILL);  // the group this process leads (qconform made it)
        _exit(0);
      }
    }
  }).detach();
}

[[noreturn]] void load_failure(proto::LoadFailure what, const std::string& message) {
  proto::LoadError e{};
  e.h = {proto::kMagic, proto::MessageType::load_error};
  e.what = what;
  e.message_size = message.size();
  write_all(&e, sizeof e);
  write_all(message.data(), message.size());
  _exit(0);
}

const qc_arm_v1* load(const char* path) {
  dlerror();
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    load_failure(proto::LoadFailure::dlopen, e ? e : "(no dlerror message)");
  }
  dlerror();
  void* sym = dlsym(handle, QC_ARM_V1_ENTRY_SYMBOL);
  if (sym == nullptr) {
    const char* e = dlerror();
    load_failure(proto::LoadFailure::no_symbol, e ? e : "(no dlerror message)");
  }
  const qc_arm_v1* arm = reinterpret_cast<qc_arm_v1_entry_fn>(sym)();
  if (arm == nullptr) load_failure(proto::LoadFailure::entry_null, "");
  return arm;
}

// The descriptor's fields, read in the order the parent validates them: `abi_version` and
// `struct_size` lead every version of the struct, the rest is read only when both are right.
void send_hello(const qc_arm_v1* arm) {
  proto::Hello h{};
  h.h = {proto::kMagic, proto::MessageType::hello};
  h.protocol_version = proto::kProtocolVersion;
  h.abi_version = arm->abi_version;
  h.struct_size = arm->struct_size;
  std::string name, epilogue, model;
  if (arm->abi_version == QC_ARM_ABI_VERSION && arm->struct_size >= QC_ARM_V1_MIN_SIZE) {
    if (arm->struct_size >= offsetof(qc_arm_v1, accumulation_model) + sizeof(const char*) &&
        arm->accumulation_model != nullptr) {
      h.has_model = 1;
      model.assign(arm->accumulation_model, strnlen(arm->accumulation_model, proto::kMaxString));
    }
    if (arm->struct_size >= offsetof(qc_arm_v1, block_n) + sizeof(int64_t)) {
      h.block_k = arm->block_k;
      h.block_n = arm->block_n;
    }
    h.has_name = arm->name != nullptr;
    h.has_epilogue = arm->epilogue != nullptr;
    h.has_run = arm->run != nullptr;
    h.flags = arm->flags;
    if (arm->name) name.assign(arm->name, strnlen(arm->name, proto::kMaxString));
    if (arm->epilogue) epilogue.assign(arm->epilogue, strnlen(arm->epilogue, proto::kMaxString));
  }
  h.name_size = name.size();
  h.epilogue_size = epilogue.size();
  h.model_size = model.size();
  if (!write_all(&h, sizeof h) || !write_all(name.data(), name.size()) ||
      !write_all(epilogue.data(), epilogue.size()) || !write_all(model.data(), model.size())) {
    _exit(0);  // the parent is gone
  }
}

// One mapping of a memfd, re-made when the parent announces a new size.
struct Mapping {
  void* base = nullptr;
  uint64_t size = 0;
  bool remap(int fd, uint64_t want, int prot) {
    if (want == size) return true;
    if (base != nullptr) munmap(base, size);
    base = mmap(nullptr, want, prot, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      base = nullptr;
      size = 0;
      return false;
    }
    size = want;
    return true;
  }
  char* at(uint64_t offset) const { return static_cast<char*>(base) + offset; }
};

bool within(uint64_t offset, uint64_t bytes, uint64_t size) { return offset <= size && bytes <= size - offset; }

[[noreturn]] void protocol_failure(const char* what) {
  std::fprintf(stderr, "qconform-plugin-host: protocol error: %s\n", what);
  _exit(kExitProtocol);
}

void serve(const qc_arm_v1* arm) {
  Mapping inputs, outputs;
  for (;;) {
    proto::RunRequest q{};
    if (!read_all(&q, sizeof q)) _exit(0);  // qconform closed the socket: done
    if (q.h.magic != proto::kMagic || q.h.type != proto::MessageType::run) protocol_failure("bad request header");
    if (q.m < 1 || q.n < 1 || q.k < 1) protocol_failure("non-positive m, n or k");
    const uint64_t m = static_cast<uint64_t>(q.m), n = static_cast<uint64_t>(q.n), k = static_cast<uint64_t>(q.k);
    if (!inputs.remap(proto::kInputsFd, q.inputs_size, PROT_READ)) protocol_failure("cannot map the inputs");
    const bool fresh_outputs = outputs.size != q.outputs_size;
    if (!outputs.remap(proto::kOutputsFd, q.outputs_size, PROT_READ | PROT_WRITE)) {
      protocol_failure("cannot map the outputs");
    }
    // The previous call's guard pages become ordinary memory again: this call's layout differs.
    for (int g = 0; g < 3 && !fresh_outputs; ++g) {
      if (g_guards[g] != 0) mprotect(reinterpret_cast<void*>(g_guards[g]), g_page, PROT_READ | PROT_WRITE);
    }
    const uint64_t in = inputs.size, out = outputs.size;
    const bool fp8 = q.d != proto::kNone;  // an FP8 call: codes in, d out
    const bool block = fp8 && q.block_k > 0;  // a block-scaled one: and the scales in
    if (fp8 && (!within(q.a_q, m * k, in) || !within(q.w_q, n * k, in) || !within(q.d, 4 * m * n, out) ||
                !within(q.acc_written, sizeof(int), out) || !within(q.error, proto::kErrorBufferSize, out))) {
      protocol_failure("offsets outside the mappings");
    }
    if (block) {
      if (q.a_scale_cols < 1 || q.w_block_rows < 1 || q.w_scale_cols < 1) protocol_failure("bad block scale layout");
      const uint64_t w_rows = (n + static_cast<uint64_t>(q.w_block_rows) - 1) / static_cast<uint64_t>(q.w_block_rows);
      if (!within(q.a_scale, 4 * m * static_cast<uint64_t>(q.a_scale_cols), in) ||
          !within(q.w_scale, 4 * w_rows * static_cast<uint64_t>(q.w_scale_cols), in)) {
        protocol_failure("offsets outside the mappings");
      }
    }
    if (!fp8 && (!within(q.a_q, m * k, in) || !within(q.a_scale, 4 * m, in) || !within(q.w_q, n * k, in) ||
        !within(q.w_scale, 4 * n, in) || (q.bias != proto::kNone && !within(q.bias, 2 * n, in)) ||
        !within(q.y, 2 * m * n, out) || (q.acc != proto::kNone && !within(q.acc, 4 * m * n, out)) ||
        !within(q.acc_written, sizeof(int), out) || !within(q.error, proto::kErrorBufferSize, out))) {
      protocol_failure("offsets outside the mappings");
    }
    for (int g = 0; g < 3; ++g) {
      if (!within(q.guards[g], g_page, out) || q.guards[g] % g_page != 0) protocol_failure("bad guard page");
      if (mprotect(outputs.at(q.guards[g]), g_page, PROT_NONE) != 0) protocol_failure("mprotect of a guard page failed");
      g_guards[g] = reinterpret_cast<uintptr_t>(outputs.at(q.guards[g]));
    }
    g_inputs_base = reinterpret_cast<uintptr_t>(inputs.base);
    g_inputs_size = inputs.size;

    qc_arm_args_v1 args{};
    args.struct_size = sizeof(qc_arm_args_v1);
    args.m = q.m;
    args.n = q.n;
    args.k = q.k;
    args.a_q = reinterpret_cast<const int8_t*>(inputs.at(q.a_q));
    args.w_q = reinterpret_cast<const int8_t*>(inputs.at(q.w_q));
    if (fp8) {
      args.d = reinterpret_cast<float*>(outputs.at(q.d));
      if (block) {
        args.a_scale = reinterpret_cast<const float*>(inputs.at(q.a_scale));
        args.w_scale = reinterpret_cast<const float*>(inputs.at(q.w_scale));
        args.block_k = q.block_k;
        args.a_scale_cols = q.a_scale_cols;
        args.w_block_rows = q.w_block_rows;
        args.w_scale_cols = q.w_scale_cols;
      }
    } else {
      args.a_scale = reinterpret_cast<const float*>(inputs.at(q.a_scale));
      args.w_scale = reinterpret_cast<const float*>(inputs.at(q.w_scale));
      args.bias = q.bias == proto::kNone ? nullptr : reinterpret_cast<const uint16_t*>(inputs.at(q.bias));
      args.y = reinterpret_cast<uint16_t*>(outputs.at(q.y));
      args.acc = q.acc == proto::kNone ? nullptr : reinterpret_cast<int32_t*>(outputs.at(q.acc));
    }
    args.acc_written = reinterpret_cast<int*>(outputs.at(q.acc_written));
    args.error = outputs.at(q.error);
    args.error_size = proto::kErrorBufferSize;

    proto::Done d{};
    d.h = {proto::kMagic, proto::MessageType::done};
    qc::test_hold("plugin-run");  // a test may kill this worker here, inside a call
    const auto started = std::chrono::steady_clock::now();
    d.rc = arm->run(arm->ctx, &args);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    d.outputs_sum = proto::outputs_sum(outputs.at(0), q);
    if (!write_all(&d, sizeof d)) _exit(0);
    // A thread the plugin left running may still write: qconform compares the outputs it copied
    // (and the inputs) again after this grace period. A write into the inputs or a guard page now
    // faults, and the handler reports it in place of Settled.
    qc::test_hold("plugin-returned");
    const double grace = std::min(proto::kGraceMaxSeconds, std::max(proto::kGraceMinSeconds, seconds / 4));
    std::this_thread::sleep_for(std::chrono::duration<double>(grace));
    proto::Settled settled{};
    settled.h = {proto::kMagic, proto::MessageType::settled};
    if (!write_all(&settled, sizeof settled)) _exit(0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || std::strtoul(argv[1], nullptr, 10) != proto::kProtocolVersion) {
    std::fprintf(stderr,
                 "qconform-plugin-host: the worker process of qconform's isolated plugin arms; qconform starts it "
                 "(protocol %u), it is not run by hand\n",
                 proto::kProtocolVersion);
    return kExitUsage;
  }
  close_other_descriptors();
  const long page = sysconf(_SC_PAGESIZE);
  g_page = page > 0 ? static_cast<size_t>(page) : 4096;
  const pid_t parent = static_cast<pid_t>(std::strtol(argv[3], nullptr, 10));
  if (getppid() != parent) return 0;  // qconform is already gone
  start_watchdog(parent);
  install_fault_handlers();
  const qc_arm_v1* arm = load(argv[2]);
  send_hello(arm);
  // The parent stops here when it refuses the descriptor; `run` is called only on a Run request.
  if (arm->abi_version != QC_ARM_ABI_VERSION || arm->struct_size < QC_ARM_V1_MIN_SIZE || arm->run == nullptr) {
    proto::RunRequest q{};
    while (read_all(&q, sizeof q)) protocol_failure("a run request for a descriptor the parent must refuse");
    return 0;
  }
  serve(arm);
}
