// StagingDir (checkpoint_dir.hpp).
#include "model/checkpoint_dir.hpp"

#include <filesystem>
#include <system_error>

#include "core/fileio.hpp"
#include "core/output_lock.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace fs = std::filesystem;

StagingDir::StagingDir(const std::string& out) {
  lock_output("output", out);  // first: a second writer of `out` is refused, naming the first
  QC_INPUT(!fs::exists(out), "{}: expected a path that does not exist yet (outputs are never overwritten), found "
           "an existing {}", out, fs::is_directory(out) ? "directory" : "file");
  // Hidden and carrying this process's pid (`.<name>.qc-tmp-<pid>-...`, as the atomic writer's
  // files): a later run removes it when this process was killed before it could.
  const std::string parent = fs::path(out).has_parent_path() ? fs::path(out).parent_path().string() : ".";
  remove_orphaned_temporaries(parent);
  path = temporary_path_for(out);
  // Registered before it exists, so that no signal finds it unregistered; the CLI's
  // SIGINT/SIGTERM/SIGHUP handler removes it.
  handle = register_temporary_directory(path);
  std::error_code ec;
  fs::create_directories(path, ec);
  QC_INPUT(!ec, "{}: cannot create the temporary directory ({})", path, ec.message());
}

StagingDir::~StagingDir() {
  if (!committed) {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  unregister_temporary_directory(handle);
}

void StagingDir::commit(const std::string& out) {
  std::error_code ec;
  fs::rename(path, out, ec);
  QC_INPUT(!ec, "{}: cannot rename {} into place ({})", out, path, ec.message());
  committed = true;
  unregister_temporary_directory(handle);
  handle = -1;
}

}  // namespace qc
