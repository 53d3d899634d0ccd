// Advisory locks on the outputs of a run, so that two processes never write the same output file,
// output directory or `--resume` directory at once (docs/hostile-inputs.md, guarantee 4).
//
// A target `DIR/NAME` (a file or a directory) is locked through the lock file `DIR/.NAME.qc-lock`
// with flock(LOCK_EX | LOCK_NB): the holder writes "PID qconform VERB" into it, a second writer is
// refused at once (input error, exit 2) with the holder's pid and verb, never blocked. The kernel
// drops the lock when the holder ends, however it ends (SIGKILL included), so a stale lock file
// never blocks a later run; the holder removes its lock files when it exits normally.
//
// Locks are taken only once `enable_output_locks` was called (the CLI does, on rank 0 of a job);
// the library and the Python binding take none.
#pragma once

#include <string>

namespace qc {

// From now on `lock_output` takes locks, naming this process as `owner` (e.g. "qconform verify");
// an empty `owner` turns them off again (tests).
void enable_output_locks(std::string owner);

// Takes (and holds until the process exits) the advisory lock of `path`, named in messages as
// `option` (`--out`, `--resume`). Does nothing when locks are not enabled, when `path` is empty,
// when its directory does not exist (the writer names that problem) or when this process holds it
// already. Input error when another process holds it.
void lock_output(const std::string& option, const std::string& path);

// Removes this process's lock files and drops their locks now (what its normal exit does), for a process
// that ends without running its static destructors.
void release_output_locks();

}  // namespace qc
