#!/usr/bin/env python3
"""Fault injection for the hostile suite: kill a qconform run while its atomic writer is writing.

  kill_mid_write.py SIGNAL DEST [--point TEXT] [--keep] -- command...

Starts the command held at the test hook `write` (src/core/test_hold.hpp) of DEST (or of the
first destination whose path contains TEXT): the process stops right after the first bytes of
DEST's temporary file were written, so the signal always lands mid-write, on any machine. Then it
sends SIGNAL and waits. Then checks:
- the process died of SIGNAL (for SIGINT/SIGTERM/SIGHUP that is what the CLI's handler re-raises);
- DEST is byte-identical to what it was before (or still absent);
- for every signal but SIGKILL: no temporary file of DEST is left (`.<name>.qc-tmp-*`, files and
  directories). SIGKILL cannot be caught: the leftover is reported and removed, unless --keep
  (then the next run that writes there must remove it: docs/hostile-inputs.md).
Exit 0 when all hold, 1 with the reason otherwise, 125 when the run never reached the hook (a
defect: writing DEST lies on its path).
"""
import glob
import hashlib
import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hold import Held  # noqa: E402


def digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except (FileNotFoundError, IsADirectoryError):
        return "directory" if os.path.isdir(path) else None


def temps(dest):
    """Temporary files and directories of the atomic writer for DEST: `.<name>.qc-tmp-*` beside it."""
    d = os.path.dirname(dest) or "."
    return sorted(glob.glob(os.path.join(d, "." + os.path.basename(dest) + ".qc-tmp-*")))


def size_of(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if os.path.isfile(os.path.join(path, f)))


def main():
    sig = getattr(signal, "SIG" + sys.argv[1])
    dest = sys.argv[2]
    opts = sys.argv[3:sys.argv.index("--")]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    point = opts[opts.index("--point") + 1] if "--point" in opts else os.path.basename(dest)
    keep = "--keep" in opts
    before = digest(dest)
    h = Held(f"write@{point}", cmd)
    if not h.wait_held():
        rc, out = h.finish()
        print(f"the run ended (status {rc}) before it wrote {point}: the hook `write` was never reached (a defect)")
        print(out[-1000:])
        return 125
    size = sum(size_of(t) for t in temps(dest))
    h.p.send_signal(sig)
    rc, out = h.finish()
    problems = []
    if rc != 128 + sig:
        problems.append(f"expected death by {signal.Signals(sig).name}, found status {rc}")
    if digest(dest) != before:
        problems.append(f"data loss: {dest} changed")
    left = temps(dest)
    if left and sig != signal.SIGKILL:
        problems.append(f"temporary files left behind: {left}")
    if left and not keep:
        for t in left:
            shutil.rmtree(t) if os.path.isdir(t) else os.unlink(t)
    print(f"{signal.Signals(sig).name} while {size} bytes of the temporary file were written (held at the hook "
          f"`write` of {h.held_path}): status {rc}, destination {'intact' if digest(dest) == before else 'CHANGED'}, "
          f"{len(left)} temporary file(s) left"
          f"{' (SIGKILL cannot be caught; ' + ('kept for the next run' if keep else 'removed by the test') + ')' if left else ''}")
    if problems:
        print("; ".join(problems))
        print(out[-1000:])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
