// Files: whole-file reads, atomic writes (temporary file + fsync + rename, so a reader never sees
// a half-written output and a failed write leaves nothing behind), and a read-only memory map.
//
// Every failure is a `qc::Error` of kind `input` naming the path and the errno text.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace qc {

// The whole content of `path`.
std::string read_file(const std::string& path);

// Writes `content` to `path` atomically: a temporary file in the same directory, fsync, rename,
// fsync of the directory. On failure the temporary file is removed and `path` is untouched.
void write_file_atomic(const std::string& path, std::string_view content);

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
  // fsync, permissions as for a newly created file (0666 & ~umask), rename into place, fsync of
  // the directory. Calling any member after `commit()` is a bug.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// `text` made safe to print inside an error message: valid UTF-8 is kept, control characters and
// bytes that are not valid UTF-8 become `\xNN`, and the result is cut to `max_bytes` (plus "...").
// Error messages quote names and snippets from untrusted files; they must stay printable text.
std::string printable_text(std::string_view text, size_t max_bytes = 200);

// A read-only, private memory map of a whole file (empty files map to an empty span). Not
// copyable; share it through `std::shared_ptr` to keep views alive.
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

 private:
  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace qc
