// The guards of docs/hostile-inputs.md added for issue #33, at library level: orphaned temporary
// files (removed only when their process is dead), the output locks (a second process is refused,
// naming the holder), the numeric option validators' one message style, and the isolated plugin
// arm's time limit that follows the work. The hostile suite (tests/hostile/) drives the same
// through the CLI with real processes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "arms/plugin/plugin_limits.hpp"
#include "cli/cli.hpp"
#include "cli/lists.hpp"
#include "core/fileio.hpp"
#include "core/output_lock.hpp"
#include "qconform/error.hpp"

namespace qc {
namespace {

namespace fs = std::filesystem;

class OutputGuards : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qc-guards-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static void touch(const std::string& p, const std::string& text) { std::ofstream(p) << text; }

  fs::path dir_;
  static inline int counter_ = 0;
};

// A pid that no process has any more: a child that exited and was reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST_F(OutputGuards, TemporaryNamesCarryPidAndHostTag) {
  const std::string name = fs::path(temporary_path_for(path("o.safetensors"))).filename().string();
  std::smatch m;
  ASSERT_TRUE(std::regex_match(name, m, std::regex(R"(\.o\.safetensors\.qc-tmp-(\d+)-([0-9a-f]{8})-[A-Za-z0-9]{6})")))
      << name;
  EXPECT_EQ(m[1].str(), std::to_string(::getpid()));
  EXPECT_NE(temporary_path_for(path("o.safetensors")), temporary_path_for(path("o.safetensors")));
}

TEST_F(OutputGuards, OrphansOfDeadProcessesAreRemovedOthersKept) {
  const std::string probe = fs::path(temporary_path_for(path("x"))).filename().string();
  const std::string tag = probe.substr(probe.size() - 15, 8);  // <pid>-<tag>-<6>
  const pid_t dead = dead_pid();
  const auto name = [&](pid_t pid, const std::string& host) {
    return path(".o.safetensors.qc-tmp-" + std::to_string(pid) + "-" + host + "-abcdef");
  };
  const std::string orphan = name(dead, tag), live = name(::getppid(), tag), other_host = name(dead, "00000000");
  const std::string foreign = path(".o.safetensors.qc-tmp-notapid"), mine = name(::getpid(), tag);
  for (const std::string& p : {orphan, live, other_host, foreign, mine}) touch(p, "x");
  fs::create_directories(name(dead, tag) + "d");  // not of the form: kept
  const std::string orphan_dir = path(".m.qc-tmp-" + std::to_string(dead) + "-" + tag + "-ABCDEF");
  fs::create_directories(orphan_dir);
  touch(orphan_dir + "/model.safetensors", "partial");

  testing::internal::CaptureStderr();
  remove_orphaned_temporaries(dir_.string());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(orphan)) << err;
  EXPECT_FALSE(fs::exists(orphan_dir)) << err;
  for (const std::string& p : {live, other_host, foreign, mine, name(dead, tag) + "d"}) EXPECT_TRUE(fs::exists(p)) << p;
  EXPECT_NE(err.find("a temporary file left by qconform process " + std::to_string(dead) + ", which is no longer running"),
            std::string::npos) << err;
  EXPECT_NE(err.find("a temporary directory left by qconform process"), std::string::npos) << err;
  // Once per directory and process: a second sweep of the same directory does nothing.
  touch(orphan, "again");
  remove_orphaned_temporaries(dir_.string());
  EXPECT_TRUE(fs::exists(orphan));
}

// A directory swept, removed, and another made elsewhere with the same inode number (file systems reuse
// them at once): the new one is swept too. (Keyed by inode alone, an earlier test's directory made this
// one's sweep a no-op now and then.)
TEST_F(OutputGuards, ADirectoryWithAReusedInodeIsSweptAgain) {
  const std::string tag = [&] {
    const std::string probe = fs::path(temporary_path_for(path("x"))).filename().string();
    return probe.substr(probe.size() - 15, 8);
  }();
  const pid_t dead = dead_pid();
  for (int attempt = 0; attempt < 20; ++attempt) {
    const fs::path first = dir_ / ("first-" + std::to_string(attempt));
    fs::create_directories(first);
    testing::internal::CaptureStderr();
    remove_orphaned_temporaries(first.string());
    (void)testing::internal::GetCapturedStderr();
    struct stat a {};
    ASSERT_EQ(::stat(first.c_str(), &a), 0);
    fs::remove(first);
    const fs::path second = dir_ / ("second-" + std::to_string(attempt));
    fs::create_directories(second);
    struct stat b {};
    ASSERT_EQ(::stat(second.c_str(), &b), 0);
    if (a.st_dev != b.st_dev || a.st_ino != b.st_ino) continue;  // not reused this time: again
    const std::string orphan = (second / (".o.qc-tmp-" + std::to_string(dead) + "-" + tag + "-abcdef")).string();
    touch(orphan, "x");
    testing::internal::CaptureStderr();
    remove_orphaned_temporaries(second.string());
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(fs::exists(orphan)) << "the directory with a reused inode was not swept; " << err;
    return;
  }
  GTEST_SKIP() << "the file system of " << dir_ << " gave no reused inode in 20 tries";
}

TEST_F(OutputGuards, SecondWriterIsRefusedNamingTheHolder) {
  const std::string target = path("o.safetensors");
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    enable_output_locks("qconform holder");
    lock_output("--out", target);
    (void)!::write(ready[1], "1", 1);
    char c;
    (void)!::read(release[0], &c, 1);
    ::_exit(0);  // no destructors: the kernel drops the lock
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  enable_output_locks("qconform second");
  try {
    lock_output("--out", target);
    ADD_FAILURE() << "a second writer was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--out `" + target + "`: another qconform process is writing it: pid " + std::to_string(child) +
                       " (qconform holder)"), std::string::npos) << msg;
  }
  (void)!::write(release[1], "1", 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  // The holder is gone (its lock file stays, unlocked): the lock is free again, and a lock this
  // process holds already is not taken twice.
  EXPECT_NO_THROW(lock_output("--out", target));
  EXPECT_NO_THROW(lock_output("--out", target));
  enable_output_locks("");  // off again for the other tests of this process
  for (int fd : {ready[0], ready[1], release[0], release[1]}) ::close(fd);
}

TEST(NumericOptions, OneMessageStyle) {
  const auto check = [](CLI::Validator v, std::string text) { return v(text); };
  size_t count = 0;
  int64_t tolerance = 0;
  uint64_t seed = 0;
  int64_t length = 0;
  EXPECT_EQ(check(cli::positive_integer(count), "0"), "expected a positive integer, found 0");
  EXPECT_EQ(check(cli::positive_integer(count), "12"), "");
  EXPECT_EQ(check(cli::positive_integer(count), "abc"), "expected a positive integer, found abc");
  EXPECT_EQ(check(cli::positive_integer(count), ""), "expected a positive integer, found nothing");
  EXPECT_EQ(check(cli::positive_integer(count), "99999999999999999999"),
            "expected a positive integer of at most 18446744073709551615, found 99999999999999999999");
  EXPECT_EQ(check(cli::non_negative_integer(seed), "-1"), "expected a non-negative integer, found -1");
  EXPECT_EQ(check(cli::non_negative_integer(seed), "0"), "");
  EXPECT_EQ(check(cli::non_negative_integer(seed), "010"),
            "expected a non-negative integer written without leading zeros (it would be read as octal), found 010");
  EXPECT_EQ(check(cli::non_negative_integer(seed), "0x10"), "expected a non-negative integer, found 0x10");
  EXPECT_EQ(check(cli::non_negative_integer(tolerance), "9223372036854775808"),
            "expected a non-negative integer of at most 9223372036854775807, found 9223372036854775808");
  EXPECT_EQ(check(cli::integer_in(length, int64_t{2}, int64_t{16}), "17"), "expected an integer in [2, 16], found 17");
  EXPECT_EQ(check(cli::finite_in(0, 1), "nan"), "expected a finite number in [0, 1], found nan");
  EXPECT_EQ(check(cli::finite_in(0, 1), "0.5"), "");
  EXPECT_EQ(check(cli::number_in(1e-9, 10, "a number of seconds"), "inf"), "expected a number of seconds, found inf");
}

// An arm label may spell a model with commas inside parentheses (what identify prints): lists split
// only at the commas outside them.
TEST(ArmLists, CommasInsideParenthesesDoNotSplit) {
  using V = std::vector<std::string>;
  EXPECT_EQ(cli::split_commas("a,b,,c"), (V{"a", "b", "", "c"}));
  EXPECT_EQ(cli::split_commas(""), (V{""}));
  const std::string spelled = "cpu:fp8-block-triton+fp8-model(step_k=16,term_bits=25,interleave=2)";
  EXPECT_EQ(cli::split_commas("cuda:mma-fp8-block-triton," + spelled), (V{"cuda:mma-fp8-block-triton", spelled}));
  EXPECT_EQ(cli::parse_pair("--arms", spelled + ",cpu:vllm-cutlass"), std::make_pair(spelled, std::string("cpu:vllm-cutlass")));
  EXPECT_EQ(cli::split_commas("f(a,(b,c)),d"), (V{"f(a,(b,c))", "d"}));
  EXPECT_EQ(cli::split_commas("a),b"), (V{"a)", "b"}));  // an unmatched ')' does not go below depth 0
  EXPECT_THROW(cli::parse_pair("--arms", spelled), Error);  // one label only
}

TEST(PluginTimeLimit, FollowsTheWorkWithAFloor) {
  using plugin_limits::CallTimeLimit;
  CallTimeLimit adaptive;
  EXPECT_DOUBLE_EQ(adaptive.for_load(), plugin_limits::kLoadSeconds);
  EXPECT_DOUBLE_EQ(adaptive.for_call(1e3), plugin_limits::kFirstCallSeconds);  // no call to go by yet
  EXPECT_DOUBLE_EQ(adaptive.for_call(1e11), 1e11 / plugin_limits::kFirstCallMacsPerSecond);
  EXPECT_DOUBLE_EQ(adaptive.for_call(1e20), plugin_limits::kMaxSeconds);  // never beyond a week
  adaptive.record(0.001, 1e6);  // 1 ns per multiply-add
  EXPECT_DOUBLE_EQ(adaptive.for_call(1e6), plugin_limits::kFloorSeconds);
  EXPECT_DOUBLE_EQ(adaptive.for_call(1e12), plugin_limits::kMultiple * 1e-9 * 1e12);
  adaptive.record(0.0001, 1e6);  // a faster call does not lower the rate
  EXPECT_DOUBLE_EQ(adaptive.for_call(1e12), plugin_limits::kMultiple * 1e-9 * 1e12);
  EXPECT_NE(adaptive.describe(1e6).find("follows the work"), std::string::npos);
  const CallTimeLimit fixed(2.5, "--arm-timeout");
  EXPECT_DOUBLE_EQ(fixed.for_call(1e15), 2.5);
  EXPECT_DOUBLE_EQ(fixed.for_load(), 2.5);
  EXPECT_EQ(fixed.describe(1), "set by --arm-timeout");
  EXPECT_EQ(CallTimeLimit::shown(10), "10");
  EXPECT_EQ(CallTimeLimit::shown(1.5), "1.5");
}

TEST(PluginTimeLimit, FirstDifferenceFindsTheByte) {
  std::string a(200000, 'a'), b = a;
  EXPECT_FALSE(plugin_limits::first_difference(a.data(), b.data(), a.size()).has_value());
  b[131073] = 'b';
  EXPECT_EQ(plugin_limits::first_difference(a.data(), b.data(), a.size()).value(), 131073u);
  EXPECT_FALSE(plugin_limits::first_difference(a.data(), b.data(), 131073).has_value());
}

}  // namespace
}  // namespace qc
