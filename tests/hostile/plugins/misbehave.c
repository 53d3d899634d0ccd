/* A qconform arm plugin that misbehaves on purpose: correct (the example plugin's scalar GEMM
 * with the `vllm-triton` epilogue) until its AT_CALL-th call of `run` (default 1), then it does
 * the one thing its BEHAVE_* macro names. Used by tests/hostile/plugin.jsonl and
 * tests/unit/test_plugin_arm.cpp; each case compiles it with one macro:
 *
 *   cc -shared -fPIC -O1 -I$SRC/include -I$SRC/examples/plugin -DBEHAVE_SEGV \
 *      $SRC/tests/hostile/plugins/misbehave.c -o segv.so
 *
 * Behaviours at the trigger call:
 *   BEHAVE_SEGV          writes through a NULL pointer (SIGSEGV)
 *   BEHAVE_ABORT         abort() (SIGABRT), as a failed assert() does
 *   BEHAVE_FPE           integer division by zero (SIGFPE on x86; elsewhere raise(SIGFPE))
 *   BEHAVE_STACK         unbounded recursion (stack overflow, SIGSEGV)
 *   BEHAVE_EXIT0         exit(0): ends the process "successfully"
 *   BEHAVE_FORK_EXIT     forks a child that sleeps for an hour holding every descriptor (so no
 *                        end-of-file reaches qconform), writes its pid to $QC_MISBEHAVE_PIDFILE
 *                        when set, then exit(0)
 *   BEHAVE_SLEEP         sleeps for an hour
 *   BEHAVE_SPIN          spins without any system call for an hour
 *   BEHAVE_WRITE_INPUT   writes into w_q[1,2] (its read-only input)
 *   BEHAVE_MPROTECT      mprotect()s w_q writable, then writes a_scale[0] and w_q[0,0]
 *   BEHAVE_OVERRUN       writes y as if it held twice m*n elements
 *   BEHAVE_REFUSE        returns 5 with a 4096-byte unterminated error message of control bytes
 *   BEHAVE_CTOR_CRASH    crashes in a library constructor (while being loaded)
 *   BEHAVE_CTOR_HANG     sleeps in a library constructor
 *   BEHAVE_CONTROL_NAME  declares a kernel name with terminal escape sequences
 *   BEHAVE_HUGE_NAME     declares a kernel name of a million characters
 *   BEHAVE_LATE_WRITE    computes correctly, then leaves a thread that changes y[0,0] after `run`
 *                        returned
 *   BEHAVE_LATE_INPUT    computes correctly, then leaves a thread that changes w_q[0,0] after `run`
 *                        returned, through a writable reopening of the operand memfd
 *   BEHAVE_LATE_OVERRUN  computes correctly, then leaves a thread that writes past the end of y
 *   BEHAVE_REOPEN_INPUT  changes w_q[0,0] through a writable reopening of the operand memfd, during
 *                        `run`
 * The BEHAVE_LATE_* threads write only once the worker is held at its test point `plugin-returned`
 * (QCONFORM_TEST_HOLD=plugin-returned:FIFO, src/core/test_hold.hpp): they take the test's part of
 * that hold, write, then release the worker. So the write always lands after `run` returned and
 * before the worker's grace period ends, on any machine.
 * Without a BEHAVE_* macro it is a correct plugin (the example's arithmetic).
 */
#define _GNU_SOURCE
#define QC_EXAMPLE_NO_ENTRY
#include "example_arm.c"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef AT_CALL
#define AT_CALL 1
#endif

static volatile int g_zero = 0;

__attribute__((unused)) static void sleep_an_hour(void) {
  for (int i = 0; i < 3600; ++i) sleep(1);
}

__attribute__((unused)) static int recurse(volatile char* prev, int depth) {
  volatile char frame[4096];
  frame[0] = (char)depth;
  frame[4095] = prev ? prev[0] : 0;
  return recurse(frame, depth + 1) + frame[1];
}

#if defined(BEHAVE_LATE_WRITE) || defined(BEHAVE_LATE_INPUT) || defined(BEHAVE_LATE_OVERRUN) || \
    defined(BEHAVE_REOPEN_INPUT)
/* A writable view of the byte at `p`, which lies in the worker's read-only mapping of the operand
 * memfd: the memfd reopened read-write through /proc/self/fd and mapped shared (its file offset
 * found in /proc/self/maps). NULL when that is refused. */
static volatile int8_t* writable_alias(const void* p) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (!maps) return NULL;
  char line[512];
  uintptr_t start = 0, end = 0;
  unsigned long long offset = 0;
  int found = 0;
  while (fgets(line, sizeof line, maps)) {
    if (sscanf(line, "%lx-%lx %*s %llx", &start, &end, &offset) == 3 && (uintptr_t)p >= start && (uintptr_t)p < end) {
      found = 1;
      break;
    }
  }
  fclose(maps);
  if (!found) return NULL;
  const int fd = open("/proc/self/fd/4", O_RDWR); /* fd 4: the operands (plugin_protocol.hpp) */
  if (fd < 0) return NULL;
  const long page = sysconf(_SC_PAGESIZE);
  const unsigned long long at = offset + ((uintptr_t)p - start);
  const unsigned long long base = at & ~(unsigned long long)(page - 1);
  char* m = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)base);
  close(fd);
  return m == MAP_FAILED ? NULL : (volatile int8_t*)(m + (at - base));
}
#endif

#if defined(BEHAVE_LATE_WRITE) || defined(BEHAVE_LATE_INPUT) || defined(BEHAVE_LATE_OVERRUN)
static volatile uint16_t* g_late_y;
static volatile int8_t* g_late_input;
static int64_t g_late_count;

/* The test's part of the worker's hold (src/core/test_hold.hpp): read its line, write, release. */
static void* late_writer(void* unused) {
  (void)unused;
  const char* spec = getenv("QCONFORM_TEST_HOLD");
  const char* fifo = spec ? strchr(spec, ':') : NULL;
  if (!fifo) return NULL;
  ++fifo;
  int fd = open(fifo, O_RDONLY);
  char buffer[512];
  if (fd >= 0) {
    while (read(fd, buffer, sizeof buffer) > 0) {
    }
    close(fd);
  }
#if defined(BEHAVE_LATE_WRITE)
  g_late_y[0] ^= 1;
#elif defined(BEHAVE_LATE_INPUT)
  if (g_late_input) g_late_input[0] ^= 1;
#else
  g_late_y[g_late_count + 40] = 0; /* past the end: the guard page */
#endif
  fd = open(fifo, O_WRONLY);
  if (fd >= 0) close(fd);
  return NULL;
}
#endif

#if defined(BEHAVE_CTOR_CRASH)
__attribute__((constructor)) static void crash_on_load(void) { *(volatile int*)(uintptr_t)g_zero = 1; }
#elif defined(BEHAVE_CTOR_HANG)
__attribute__((constructor)) static void hang_on_load(void) { sleep_an_hour(); }
#endif

static int misbehave_run(void* ctx, const qc_arm_args_v1* args) {
  static int calls = 0;
  if (++calls < AT_CALL) return example_run(ctx, args);
#if defined(BEHAVE_SEGV)
  *(volatile int*)(uintptr_t)g_zero = 1;
#elif defined(BEHAVE_ABORT)
  abort();
#elif defined(BEHAVE_FPE)
#if defined(__x86_64__) || defined(__i386__)
  volatile int q = 1 / g_zero;
  (void)q;
#endif
  raise(SIGFPE);
#elif defined(BEHAVE_STACK)
  return recurse(NULL, 0);
#elif defined(BEHAVE_EXIT0)
  exit(0);
#elif defined(BEHAVE_FORK_EXIT)
  const pid_t child = fork();
  if (child == 0) {
    sleep_an_hour();
    _exit(0);
  }
  const char* pidfile = getenv("QC_MISBEHAVE_PIDFILE");
  if (pidfile) {
    FILE* f = fopen(pidfile, "w");
    if (f) {
      fprintf(f, "%ld\n", (long)child);
      fclose(f);
    }
  }
  exit(0);
#elif defined(BEHAVE_SLEEP)
  sleep_an_hour();
#elif defined(BEHAVE_SPIN)
  const time_t until = time(NULL) + 3600;
  volatile uint64_t x = 0;
  while (1) {
    for (int i = 0; i < 100000000; ++i) x += (uint64_t)i;
    if (time(NULL) > until) break;
  }
#elif defined(BEHAVE_WRITE_INPUT)
  ((int8_t*)args->w_q)[1 * args->k + 2] ^= 1;
#elif defined(BEHAVE_MPROTECT)
  const long page = sysconf(_SC_PAGESIZE);
  void* start = (void*)((uintptr_t)args->w_q & ~(uintptr_t)(page - 1));
  (void)mprotect(start, (size_t)page, PROT_READ | PROT_WRITE); /* refused for a read-only mapping */
  ((float*)args->a_scale)[0] = 1.0f;
  ((int8_t*)args->w_q)[0] ^= 1;
#elif defined(BEHAVE_OVERRUN)
  for (int64_t i = 0; i < 2 * args->m * args->n; ++i) args->y[i] = 0;
#elif defined(BEHAVE_LATE_WRITE) || defined(BEHAVE_LATE_INPUT) || defined(BEHAVE_LATE_OVERRUN)
  const int rc = example_run(ctx, args);
  g_late_y = args->y;
  g_late_count = args->m * args->n;
#if defined(BEHAVE_LATE_INPUT)
  g_late_input = writable_alias(args->w_q);
#endif
  pthread_t t;
  pthread_create(&t, NULL, late_writer, NULL);
  pthread_detach(t);
  return rc;
#elif defined(BEHAVE_REOPEN_INPUT)
  volatile int8_t* alias = writable_alias(args->w_q);
  if (alias) alias[0] ^= 1;
#elif defined(BEHAVE_REFUSE)
  for (size_t i = 0; i < args->error_size; ++i) args->error[i] = (char)(1 + i % 31); /* no terminator */
  return 5;
#endif
  return example_run(ctx, args);
}

#if defined(BEHAVE_HUGE_NAME)
#define X10(s) s s s s s s s s s s
static const char kHugeName[] = X10(X10(X10(X10(X10("name0"))))) X10(X10(X10(X10(X10("name1")))));
#endif

static const qc_arm_v1 kMisbehave = {
    QC_ARM_ABI_VERSION,
    (uint32_t)sizeof(qc_arm_v1),
#if defined(BEHAVE_CONTROL_NAME)
    "misbehave\033[2J\033[31m red \a\r",
#elif defined(BEHAVE_HUGE_NAME)
    kHugeName,
#else
    "misbehave: example_arm arithmetic, then a deliberate fault",
#endif
    "vllm-triton",
    QC_ARM_FLAG_WRITES_ACC,
    misbehave_run,
    NULL,
};

QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kMisbehave; }
