// The directory a model writer (`save_model`, `pow2_checkpoint`) fills before it is the output.
#pragma once

#include <string>

namespace qc {

// A fresh directory beside `out` that becomes `out` in one rename (`commit`); removed when it is
// not committed. Refuses an `out` that exists or that another writer holds.
struct StagingDir {
  std::string path;
  bool committed = false;
  int handle = -1;
  explicit StagingDir(const std::string& out);
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  void commit(const std::string& out);
};

}  // namespace qc
