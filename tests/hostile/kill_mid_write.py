#!/usr/bin/env python3
"""Fault injection for the hostile suite: kill a qconform run while its atomic writer is writing.

  kill_mid_write.py SIGNAL DEST [--watch GLOB] -- command...

Starts the command, waits (polling every millisecond) until a temporary file of the atomic writer
(`.<name>.qc-tmp-*`) appears beside DEST, stops the process there (SIGSTOP, so the signal lands
mid-write however fast the write is), sends SIGNAL and SIGCONT, and waits. Then checks:
- the process died of SIGNAL (exit status -SIGNAL) or, for SIGINT/SIGTERM/SIGHUP, that is what the
  CLI's handler re-raises;
- DEST is byte-identical to what it was before;
- for every signal but SIGKILL: no temporary file is left (SIGKILL cannot be caught: the leftover
  is reported and removed, the destination must still be intact).
Exit 0 when all hold, 1 with the reason otherwise, 3 when the run finished before a temporary file
was seen (nothing was tested).
"""
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time


def digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        return None


WATCH = None


def temps(dest):
    """Temporary files of the atomic writer for DEST (or matching --watch), and temporary output
    directories `DEST.tmp-<pid>` (synth-model, pow2)."""
    d = os.path.dirname(dest) or "."
    pattern = WATCH or os.path.join(d, "." + os.path.basename(dest) + ".qc-tmp-*")
    return sorted(set(glob.glob(pattern) + glob.glob(dest + ".tmp-*")))


def main():
    global WATCH
    sig = getattr(signal, "SIG" + sys.argv[1])
    dest = sys.argv[2]
    if "--watch" in sys.argv[:sys.argv.index("--")]:
        WATCH = sys.argv[sys.argv.index("--watch") + 1]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    before = digest(dest)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    seen = False
    while p.poll() is None and time.monotonic() < deadline:
        if temps(dest):
            p.send_signal(signal.SIGSTOP)
            seen = True
            break
        time.sleep(0.001)
    if not seen:
        p.kill()
        p.wait()
        print(f"the run ended (status {p.returncode}) before a temporary file of {dest} appeared: nothing tested")
        return 3
    size = sum(os.path.getsize(t) for t in temps(dest) if os.path.isfile(t))
    p.send_signal(sig)
    p.send_signal(signal.SIGCONT)
    _, err = p.communicate(timeout=60)
    problems = []
    if p.returncode != -sig:
        problems.append(f"expected death by {signal.Signals(sig).name}, found status {p.returncode}")
    if digest(dest) != before:
        problems.append(f"data loss: {dest} changed")
    left = temps(dest)
    if left:
        for t in left:
            shutil.rmtree(t) if os.path.isdir(t) else os.unlink(t)
        if sig != signal.SIGKILL:
            problems.append(f"temporary files left behind: {left}")
    print(f"{signal.Signals(sig).name} while {size} bytes of the temporary file were written: status {p.returncode}, "
          f"destination {'intact' if digest(dest) == before else 'CHANGED'}, "
          f"{len(left)} temporary file(s) left{' (SIGKILL cannot be caught; removed by the test)' if left else ''}")
    if problems:
        print("; ".join(problems))
        print(err.decode("utf-8", "replace")[-1000:])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
