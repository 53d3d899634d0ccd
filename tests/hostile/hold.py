#!/usr/bin/env python3
"""Fault injection at a known point of a qconform run (the test hook of src/core/test_hold.hpp).

  hold.py POINT[@TEXT] [--then 'shell command'] [--signal NAME] [--no-release] -- command...

Starts the command with QCONFORM_TEST_HOLD=POINT[@TEXT]:<a fresh FIFO>, waits until a process of
the run (qconform, or its plugin worker) reports that it is held at POINT (the first time it
reaches it; with TEXT, at a path containing TEXT), then, while it is held there:
  --then CMD    runs CMD with bash; its environment has HELD_PID (the pid of the command started
                here), HELD_POINT_PID (the pid of the process held at the point: the same, or the
                plugin worker) and HELD_PATH (the path the point named); its status is printed;
  --signal SIG  sends SIG (TERM, INT, HUP, KILL, ...) to the command's process (after --then);
and then releases the held process (unless --no-release, a signal was sent, or it is gone) and
waits for the command to end.

Its own lines, then the command's stdout and stderr, are printed; the exit status is the
command's (128 + N when it died of signal N, as bash reports it). No timer decides anything: the
process is held until this script acts. A command that ends without ever reaching POINT is a
failure (exit 125 with the reason: the point was not reached), never "nothing tested".
"""
import errno
import os
import select
import signal
import subprocess
import sys
import tempfile


def alive(pid):
    """True while `pid` runs (a zombie, or a pid that is gone, is not alive)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False


class Held:
    """The command started under QCONFORM_TEST_HOLD; `wait_held()` returns once it is held."""

    def __init__(self, point, cmd):
        self.point = point
        self.tmp = tempfile.mkdtemp(prefix="qc-hold-")
        self.fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(self.fifo)
        self.out_path = os.path.join(self.tmp, "out")
        env = dict(os.environ, QCONFORM_TEST_HOLD=f"{point}:{self.fifo}")
        with open(self.out_path, "wb") as out:
            self.p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.held_pid = None
        self.held_path = ""

    def wait_held(self):
        """True once the process reported the point; False when the command ended first."""
        # A non-blocking reader: the process's open for writing succeeds at once, and this loop
        # notices a command that ends without ever reaching the point.
        fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        line = b""
        try:
            while not line.endswith(b"\n"):
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    chunk = os.read(fd, 4096)
                    line += chunk
                    if not chunk:
                        break
                elif self.p.poll() is not None:
                    return False
        finally:
            os.close(fd)
        fields = line.decode("utf-8", "replace").strip().split(" ", 2)
        self.held_pid = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else self.p.pid
        self.held_path = fields[2] if len(fields) > 2 else ""
        return True

    def release(self):
        """The held process waits in open(FIFO, O_RDONLY): opening for writing and closing releases it."""
        while True:
            try:
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                if self.p.poll() is not None or not alive(self.held_pid):
                    return
                select.select([], [], [], 0.01)

    def finish(self):
        """Waits for the command; returns (status as bash reports it, its output)."""
        rc = self.p.wait()
        with open(self.out_path, "rb") as f:
            out = f.read().decode("utf-8", "replace")
        for path in (self.out_path, self.fifo):
            os.unlink(path)
        os.rmdir(self.tmp)
        return (128 - rc if rc < 0 else rc), out

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def main():
    argv = sys.argv[1:]
    if "--" not in argv or not argv or argv[0].startswith("-"):
        print(__doc__)
        return 64
    point = argv[0]
    opts = argv[1:argv.index("--")]
    cmd = argv[argv.index("--") + 1:]
    then = sig = None
    release = True
    i = 0
    while i < len(opts):
        if opts[i] == "--then":
            then = opts[i + 1]
            i += 2
        elif opts[i] == "--signal":
            sig = getattr(signal, "SIG" + opts[i + 1])
            i += 2
        elif opts[i] == "--no-release":
            release = False
            i += 1
        else:
            print(f"hold.py: unknown option {opts[i]}")
            return 64
    h = Held(point, cmd)
    try:
        if not h.wait_held():
            rc, out = h.finish()
            print(f"hold.py: the command ended (status {rc}) without reaching the hold point {point}: a defect "
                  "(the point lies on the path of every such run), not a matter of timing")
            sys.stdout.write(out)
            return 125
        print(f"hold.py: held at {point} (pid {h.held_pid}) {h.held_path}")
        if then:
            env = dict(os.environ, HELD_PID=str(h.p.pid), HELD_POINT_PID=str(h.held_pid), HELD_PATH=h.held_path)
            r = subprocess.run(["bash", "-c", then], env=env)
            print(f"hold.py: --then exited with status {r.returncode}")
        if sig is not None:
            h.p.send_signal(sig)
            print(f"hold.py: sent {signal.Signals(sig).name} to the command")
        elif release:
            h.release()
        rc, out = h.finish()
    finally:
        h.kill()
    sys.stdout.write(out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
