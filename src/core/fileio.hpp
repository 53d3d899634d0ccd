// Files: whole-file reads, atomic writes (temporary file + fsync + rename, so a reader never sees
// a half-written output and a failed write leaves nothing behind), and a read-only memory map.
//
// Every failure is a `qc::Error` of kind `input` naming the path and the errno text.
//
// Hostile paths (docs/hostile-inputs.md): every reader opens through `open_input`, which never
// blocks on a FIFO and refuses anything but a regular file; every CLI verb checks its outputs
// against its inputs with `check_output_paths` before any work; the atomic writer's temporary
// files are registered so that the CLI's signal handlers (`install_cli_signal_handlers`) can remove
// them on SIGINT/SIGTERM/SIGHUP; a mapped input that shrinks under a reader (SIGBUS) becomes an
// error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qc {

// Opens `path` read-only for a reader: `O_NONBLOCK` first, so that opening a FIFO returns at once
// instead of waiting for a writer, then `fstat` refuses everything that is not a regular file
// (directory, FIFO, socket, character or block device), then `O_NONBLOCK` is cleared. Returns the
// descriptor (the caller closes it); `size` receives the file's size. Input error otherwise.
int open_input(const std::string& path, uint64_t* size = nullptr);

// The whole content of `path` (opened with `open_input`).
std::string read_file(const std::string& path);

// One path a command line names, with the option that named it (`--out`, `OPS`, `--manifest`).
struct PathUse {
  std::string option;
  std::string path;
};

// Refuses (input error, exit 2) before any work when an output would destroy an input or another
// output, or would replace something that is not a regular file:
// - an output that exists must be a regular file (a directory, FIFO, socket or device is refused:
//   the atomic writer's rename would replace a device node by a regular file);
// - an output must not be the same file as any input (same device and inode, so symbolic and hard
//   links and `./a` vs `a` are caught), nor lie inside an input directory's listed files;
// - two outputs must not be the same path (resolved through their parent directory when they do
//   not exist yet).
// The message names both options and both paths. Empty paths are skipped.
// Then each output's advisory lock is taken (`lock_output`, core/output_lock.hpp: only when the CLI
// enabled locks): another qconform process writing one of them is refused, naming its pid and verb.
void check_output_paths(const std::vector<PathUse>& inputs, const std::vector<PathUse>& outputs);

// For a verb that writes files of its own naming into an output directory (`conform --out`):
// refuses (input error) an input that is that directory or lies directly in it.
void check_inputs_outside_directory(const std::vector<PathUse>& inputs, const PathUse& dir);

// Installs the CLI's handlers (call once, from `main`, never from the library):
// - SIGINT, SIGTERM, SIGHUP: remove every live temporary file of `AtomicFileWriter`, then die of
//   the same signal (the default action), so the exit status still says which signal it was;
// - SIGXFSZ: ignored, so that a write beyond `ulimit -f` fails with EFBIG and becomes an input
//   error naming the output instead of killing the process;
// - SIGBUS: when the faulting address lies in a `MappedFile` (the file shrank while it was being
//   read), print an error naming the file and the offset, remove the temporary files and exit 2;
//   any other SIGBUS keeps its default action.
void install_cli_signal_handlers();

// A temporary output directory that is renamed into place when complete (`synth-model`, `pow2`):
// registered, the CLI's SIGINT/SIGTERM/SIGHUP handler removes it with the files directly in it.
// Returns a handle (-1 when the registry is full) for `unregister_temporary_directory`.
int register_temporary_directory(const std::string& path);
void unregister_temporary_directory(int handle);

// A fresh temporary name beside `destination` for a file or directory that is renamed into place:
// `<dir>/.<name>.qc-tmp-<pid>-<host>-<random>`, where <pid> is this process's and <host> eight hex
// digits naming this host and pid namespace (so that a process elsewhere on a shared file system
// is never taken for a dead one here).
std::string temporary_path_for(const std::string& destination);

// Removes, from `directory`, the temporary files and directories of qconform's naming (above) that
// were left by a process of this host that is no longer running (killed by SIGKILL, or a machine
// that lost power, before its cleanup ran), and reports each on stderr. A name whose process is
// alive (or whose pid now belongs to another process), of another host, or not exactly of that
// form is left alone. Runs once per directory per process; every writer of a file or temporary
// directory calls it before it creates its own.
void remove_orphaned_temporaries(const std::string& directory);

// The temporary files of live `AtomicFileWriter`s (for tests of the registry).
std::vector<std::string> live_temporary_files();

// Writes `content` to `path` atomically: a temporary file in the same directory, fsync, rename,
// fsync of the directory. On failure the temporary file is removed and `path` is untouched.
void write_file_atomic(const std::string& path, std::string_view content);
// Several outputs of one run, all or nothing as far as this process can make it so: every file is
// written to its temporary and made durable (the fsyncs in parallel, one thread per file: on a disk
// whose fsync takes tens of milliseconds the files cost one wait, not one each) before the first is
// renamed into place; then the renames in the given order and one fsync per directory. A failure
// before the renames leaves none of them written.
void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& path_and_content);

// Streams an output to a temporary file beside `path`; `commit()` makes it appear at `path` in
// one rename. Destroying an uncommitted writer removes the temporary file, so an exception
// anywhere between construction and `commit()` leaves no trace on disk.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(std::span<const std::byte> bytes);
  void write(std::string_view text);
  // Permissions as for a newly created file (0666 & ~umask) and fsync: the content is durable, not yet
  // in place. commit() does it when it was not done.
  void sync();
  // sync, rename into place, fsync of the directory (unless `sync_directory_too` is false: the
  // caller does it once for several files). Calling any member after `commit()` is a bug.
  void commit(bool sync_directory_too = true);

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  int slot_ = -1;  // index in the registry of live temporary files, -1 when not registered
  bool committed_ = false;
  bool wrote_ = false;  // the first write passes the test hook `write`
  bool synced_ = false;
};

// `text` made safe to print inside an error message: `qc::printable` (error.hpp: printable UTF-8
// kept, control characters, DEL, C1 controls and invalid bytes as `\xNN`, a backslash as `\\`),
// cut to `max_bytes` (plus "..."). Error messages quote names and snippets from untrusted files
// and the command line; they must stay printable text.
std::string printable_text(std::string_view text, size_t max_bytes = 200);

// A read-only, private memory map of a whole file (empty files map to an empty span). Not
// copyable; share it through `std::shared_ptr` to keep views alive.
//
// Reads of a mapping whose file was truncated after mapping raise SIGBUS. Every mapping is
// registered while it lives, so the CLI's SIGBUS handler (`install_cli_signal_handlers`) turns
// such a read into an error naming the file; `check_unchanged()` re-checks the size with `fstat`
// (readers call it before and after heavy passes).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Input error when the file's size is no longer the mapped size (it was truncated or grew).
  void check_unchanged() const;

 private:
  void release() noexcept;

  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;    // kept open for `check_unchanged`
  int slot_ = -1;  // index in the SIGBUS registry, -1 when not registered
};

// The file a live `MappedFile` maps under all of [p, p + bytes), if any: its descriptor (open while it is
// mapped) and the view's offset in it, for reading those bytes with pread instead of through the mapping.
// The caller keeps the MappedFile alive while it reads.
struct MappedSource {
  int fd = -1;
  uint64_t offset = 0;
};
std::optional<MappedSource> find_mapped_source(const void* p, size_t bytes);

}  // namespace qc
