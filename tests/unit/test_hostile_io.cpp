// The library facilities behind docs/hostile-inputs.md: safe opening of inputs, output-path clash
// checks, bounded JSON nesting, memory estimates, and the temporary-file registry with the CLI's
// signal handlers (exercised in forked children, so the test process keeps its own handlers).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/limits.hpp"
#include "input_error.hpp"

namespace qc {
namespace {

namespace fs = std::filesystem;
using test::input_error;

class HostileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("qc-hostile-unit-{}-{}", ::getpid(), counter_++);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }

  fs::path dir_;
  static inline int counter_ = 0;
};

TEST_F(HostileIo, OpenInputRefusesFifoWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = input_error([&] { open_input(path("fifo")); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(msg.find("expected a regular file, found a FIFO"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fifo"), std::string::npos) << msg;
  // Every reader goes through it.
  EXPECT_NE(input_error([&] { read_file(path("fifo")); }).find("FIFO"), std::string::npos);
  EXPECT_NE(input_error([&] { MappedFile m(path("fifo")); }).find("FIFO"), std::string::npos);
}

TEST_F(HostileIo, OpenInputRefusesDirectoriesAndDevices) {
  EXPECT_NE(input_error([&] { open_input(dir_.string()); }).find("found a directory"), std::string::npos);
  if (fs::exists("/dev/null")) {
    EXPECT_NE(input_error([&] { open_input("/dev/null"); }).find("found a character device"), std::string::npos);
  } else {
    GTEST_SKIP() << "SKIPPED: no /dev/null on this system";
  }
}

TEST_F(HostileIo, OpenInputReadsRegularFilesBlocking) {
  write("a.txt", "hello");
  uint64_t size = 0;
  const int fd = open_input(path("a.txt"), &size);
  EXPECT_EQ(size, 5u);
  EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0) << "O_NONBLOCK must be cleared for regular files";
  ::close(fd);
  EXPECT_EQ(read_file(path("a.txt")), "hello");
}

TEST_F(HostileIo, OutputSameAsInputIsRefusedNamingBothOptions) {
  write("in.bin", "data");
  const std::string msg = input_error([&] { check_output_paths({{"OPS", path("in.bin")}}, {{"--out", path("in.bin")}}); });
  EXPECT_NE(msg.find("--out"), std::string::npos) << msg;
  EXPECT_NE(msg.find("OPS"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is the same file as the input"), std::string::npos) << msg;
  // Through a symbolic link, a hard link and a `..` detour.
  fs::create_symlink(path("in.bin"), path("sym.bin"));
  fs::create_hard_link(path("in.bin"), path("hard.bin"));
  fs::create_directories(dir_ / "sub");
  for (const std::string& out : {path("sym.bin"), path("hard.bin"), path("sub/../in.bin")}) {
    EXPECT_NE(input_error([&] { check_output_paths({{"A", path("in.bin")}}, {{"--json", out}}); }).find("same file"),
              std::string::npos)
        << out;
  }
}

TEST_F(HostileIo, DistinctAndNewOutputsAreAccepted) {
  write("in.bin", "data");
  write("old.json", "{}");
  EXPECT_NO_THROW(check_output_paths({{"A", path("in.bin")}}, {{"--out", path("new.bin")}, {"--json", path("old.json")}}));
  EXPECT_NO_THROW(check_output_paths({{"A", ""}}, {{"--out", ""}}));  // unset options are skipped
}

TEST_F(HostileIo, TwoOutputsOnOnePathAreRefused) {
  const std::string msg = input_error(
      [&] { check_output_paths({}, {{"--out", path("x.jsonl")}, {"--tokens-out", dir_.string() + "/./x.jsonl"}}); });
  EXPECT_NE(msg.find("is the same file as the output --out"), std::string::npos) << msg;
}

TEST_F(HostileIo, SpecialOutputsAreRefused) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  EXPECT_NE(input_error([&] { check_output_paths({}, {{"--json", path("fifo")}}); }).find("found a FIFO"),
            std::string::npos);
  EXPECT_NE(input_error([&] { check_output_paths({}, {{"--json", dir_.string()}}); }).find("found a directory"),
            std::string::npos);
  if (fs::exists("/dev/null")) {
    EXPECT_NE(input_error([&] { check_output_paths({}, {{"--json", "/dev/null"}}); }).find("character device"),
              std::string::npos);
  }
}

TEST_F(HostileIo, InputsInsideAnOutputDirectoryAreRefused) {
  fs::create_directories(dir_ / "out");
  write("out/prompts.txt", "x");
  write("elsewhere.txt", "x");
  EXPECT_NE(input_error([&] {
              check_inputs_outside_directory({{"--prompts", path("out/prompts.txt")}}, {"--out", path("out")});
            }).find("lies in the output directory"),
            std::string::npos);
  EXPECT_NE(input_error([&] { check_inputs_outside_directory({{"--model", path("out")}}, {"--out", path("out")}); })
                .find("is the output directory"),
            std::string::npos);
  EXPECT_NO_THROW(check_inputs_outside_directory({{"--prompts", path("elsewhere.txt")}}, {"--out", path("out")}));
  EXPECT_NO_THROW(check_inputs_outside_directory({{"--prompts", path("out/prompts.txt")}}, {"--out", path("new")}));
}

TEST(PrintableText, OneEscapingRuleAndCutsAtTokenBoundaries) {
  EXPECT_EQ(printable_text("ok-name"), "ok-name");
  EXPECT_EQ(printable_text("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(printable_text("a\x1b[2Jb"), printable("a\x1b[2Jb")) << "two escaping rules";
  EXPECT_EQ(printable_text("\xc2\x85"), "\\xc2\\x85") << "a C1 control (NEL) is escaped";
  // 100 escapes cut at 10 bytes: two whole escapes, never a partial one.
  EXPECT_EQ(printable_text(std::string(100, '\x07'), 10), "\\x07\\x07...");
  // A multi-byte character is never split.
  EXPECT_EQ(printable_text("ab\xc3\xa9" "cd", 3), "ab...");
}

TEST(JsonDepth, LimitIsExactAndStringsDoNotCount) {
  const auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_NO_THROW(check_json_depth(nested(kMaxJsonDepth), "x"));
  try {
    check_json_depth(nested(kMaxJsonDepth + 1), "file.json");
    ADD_FAILURE() << "depth " << kMaxJsonDepth + 1 << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file.json: JSON nested deeper than 64 levels"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("byte offset 64"), std::string::npos) << e.what();
  }
  // Brackets inside strings, escaped quotes included, are text.
  const std::string in_string = "{\"a\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}";
  EXPECT_NO_THROW(check_json_depth(in_string, "x"));
  EXPECT_EQ(parse_json(in_string, "x")["a"].get<std::string>().size(), 2001u);
}

TEST(JsonDepth, DeepInputIsRefusedBeforeParsing) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  try {
    parse_json(deep, "deep.json");
    ADD_FAILURE() << "a 200000-deep document was parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("deep.json"), std::string::npos);
  }
}

TEST(JsonDepth, ParseErrorsNameTheSource) {
  try {
    parse_json("{\"a\": ", "m.json");
    ADD_FAILURE() << "invalid JSON was parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("m.json: expected valid JSON"), std::string::npos) << e.what();
  }
}

TEST(MemoryEstimate, RefusesAboveTheLimitWithTheEstimate) {
  ::setenv("QCONFORM_MEMORY_LIMIT", "1e6", 1);
  EXPECT_EQ(available_memory_bytes(), 1000000u);
  EXPECT_NO_THROW(check_memory_estimate(999999, "small"));
  try {
    check_memory_estimate(2e6, "--m 7");
    ADD_FAILURE() << "2e6 bytes were accepted under a 1e6 limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("--m 7: would allocate about 1.91 MiB (2000000 bytes)"), std::string::npos)
        << e.what();
  }
  ::setenv("QCONFORM_MEMORY_LIMIT", "-5", 1);
  EXPECT_THROW(available_memory_bytes(), Error);
  ::unsetenv("QCONFORM_MEMORY_LIMIT");
  EXPECT_THROW(check_memory_estimate(NAN, "nan"), Error);
}

TEST_F(HostileIo, TemporaryFilesAreRegisteredWhileLive) {
  std::string temp;
  {
    AtomicFileWriter w(path("out.bin"));
    temp = w.temp_path();
    const auto live = live_temporary_files();
    EXPECT_NE(std::find(live.begin(), live.end(), temp), live.end());
    w.write(std::string_view("abc"));
    w.commit();
    const auto after = live_temporary_files();
    EXPECT_EQ(std::find(after.begin(), after.end(), temp), after.end()) << "a committed writer stays registered";
  }
  {
    AtomicFileWriter w(path("other.bin"));
    temp = w.temp_path();
  }
  const auto after = live_temporary_files();
  EXPECT_EQ(std::find(after.begin(), after.end(), temp), after.end());
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(read_file(path("out.bin")), "abc");
}

// verify's JSON and manifest: both in place with their contents, or, when one of them cannot be
// written, neither (and no temporary file left).
TEST_F(HostileIo, FilesWrittenTogetherAreAllOrNothing) {
  write_files_atomic({{path("a.json"), "{\"a\": 1}\n"}, {path("a.json.manifest.json"), "{}\n"}});
  EXPECT_EQ(read_file(path("a.json")), "{\"a\": 1}\n");
  EXPECT_EQ(read_file(path("a.json.manifest.json")), "{}\n");
  const std::string err =
      input_error([&] { write_files_atomic({{path("b.json"), "b"}, {path("missing/b.manifest.json"), "m"}}); });
  EXPECT_NE(err.find("b.manifest.json"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(path("b.json"))) << "the first file was renamed into place though the second failed";
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".qc-tmp-"), std::string::npos) << entry.path();
  }
  EXPECT_TRUE(live_temporary_files().empty());
  write_files_atomic({});  // nothing to write: nothing happens
}

// Runs `body` in a forked child; returns its wait status.
template <class F>
int in_child(F&& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST_F(HostileIo, SignalsRemoveTemporaryFilesAndStillKill) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const std::string dest = path(fmt::format("sig{}.bin", sig));
    write(fmt::format("sig{}.bin", sig), "keep");
    const int status = in_child([&] {
      install_cli_signal_handlers();
      AtomicFileWriter w(dest);
      w.write(std::string_view("partial"));
      const int tmpdir_handle = register_temporary_directory(path("tmpdir"));
      fs::create_directories(path("tmpdir"));
      std::ofstream(path("tmpdir/file")) << "x";
      (void)tmpdir_handle;
      ::raise(sig);
      ::_exit(42);  // not reached
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ": status " << status;
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_EQ(read_file(dest), "keep");
    for (const auto& entry : fs::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().filename().string().find(".qc-tmp-"), std::string::npos) << entry.path();
    }
    EXPECT_FALSE(fs::exists(path("tmpdir"))) << "signal " << sig << ": the temporary directory was left";
  }
}

TEST_F(HostileIo, FileSizeLimitIsAWriteErrorNamingTheFile) {
  const std::string dest = path("big.bin");
  const int status = in_child([&] {
    install_cli_signal_handlers();
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      AtomicFileWriter w(dest);
      w.write(std::string(1 << 16, 'x'));
      ::_exit(10);  // the write went through: the limit did not apply
    } catch (const Error& e) {
      const std::string msg = e.what();
      const bool named = msg.find(dest) != std::string::npos && msg.find("ulimit -f") != std::string::npos;
      ::_exit(named ? 0 : 11);
    }
  });
  ASSERT_TRUE(WIFEXITED(status)) << "died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no error; 11: the message does not name the file and the limit";
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".qc-tmp-"), std::string::npos) << entry.path();
  }
}

TEST_F(HostileIo, MappedFileThatShrinksIsDetected) {
  write("m.bin", std::string(3 * 65536, 'a'));
  {
    MappedFile m(path("m.bin"));
    EXPECT_NO_THROW(m.check_unchanged());
    fs::resize_file(path("m.bin"), 100);
    EXPECT_NE(input_error([&] { m.check_unchanged(); }).find("the file changed while it was being read"),
              std::string::npos);
  }
  // A read of a page past the new end raises SIGBUS; the CLI's handler turns it into exit 2.
  write("n.bin", std::string(3 * 65536, 'a'));
  const int status = in_child([&] {
    install_cli_signal_handlers();
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDERR_FILENO);  // the handler's message is not this test's output
    MappedFile m(path("n.bin"));
    fs::resize_file(path("n.bin"), 100);
    volatile std::byte sink = m.bytes()[2 * 65536];
    (void)sink;
    ::_exit(10);  // no SIGBUS: the page was readable
  });
  ASSERT_TRUE(WIFEXITED(status)) << "died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

// A view into a live mapping names its file and offset (the device upload reads those bytes with pread);
// a pointer outside every mapping, a view past the mapping's end, and a released mapping name none.
TEST_F(HostileIo, AViewIntoAMappingNamesItsFileAndOffset) {
  std::string bytes(3 * 4096 + 17, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + 3);
  write("v.bin", bytes);
  const std::byte* base = nullptr;
  {
    MappedFile m(path("v.bin"));
    base = m.bytes().data();
    const std::optional<MappedSource> at = find_mapped_source(base + 4099, 5000);
    ASSERT_TRUE(at.has_value());
    EXPECT_EQ(at->offset, 4099u);
    std::string got(5000, '\0');
    ASSERT_EQ(::pread(at->fd, got.data(), got.size(), static_cast<off_t>(at->offset)), 5000);
    EXPECT_EQ(got, bytes.substr(4099, 5000));
    EXPECT_TRUE(find_mapped_source(base, bytes.size()).has_value());       // the whole file
    EXPECT_FALSE(find_mapped_source(base + 1, bytes.size()).has_value());  // one byte past its end
    EXPECT_FALSE(find_mapped_source(got.data(), 10).has_value());           // not a mapping
  }
  EXPECT_FALSE(find_mapped_source(base, 1).has_value());  // released
}

}  // namespace
}  // namespace qc
