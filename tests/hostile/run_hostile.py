#!/usr/bin/env python3
"""The hostile-input suite: cases as data (tests/hostile/*.jsonl), one fresh temp dir per case.

Each line of a .jsonl file is one case:
  {"id": "verb-class-what", "class": "data-loss"|"false-pass"|"crash"|"hang"|"unclear"|"fault",
   "setup": ["shell command", ...],      optional, run with bash in the case's temp dir
   "cmd": "shell command line",          run with bash in the case's temp dir
   "exit": 2,                            expected exit status
   "stderr": ["fragment", ...],          each must appear in stderr+stdout
   "unchanged": ["relative/path", ...],  bytes compared before and after cmd
   "timeout": 30,                        seconds (default 60)
   "needs": "shared"|"tmpfs"|"root"}     optional; unmet -> SKIPPED with the reason
Commands see QC (the qconform binary), DATA (tests/hostile/data), SRC (the source tree), SHARED
(../shared), CC (a C compiler), CASE (the case's temp dir).

A case fails when: it runs past its timeout (killed; a hang), it dies of a signal (a crash), its
exit status differs, a fragment is missing, an `unchanged` file changed, or a temporary file of the
atomic writer (`.*.qc-tmp-*`) or temporary output directory (`*.tmp-<pid>`) is left anywhere in the
case dir. Exit 1 if any case failed.

Usage: run_hostile.py --qc build/qconform [--filter SUBSTRING] [--verbose] [--jobs N]
"""
import argparse
import collections
import concurrent.futures
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES = ("data-loss", "false-pass", "crash", "hang", "unclear", "fault")
SIGNAL_NAMES = {getattr(signal, n): n for n in dir(signal) if n.startswith("SIG") and not n.startswith("SIG_")}


def load_cases():
    cases, errors = [], []
    seen = set()
    for path in sorted(glob.glob(os.path.join(HERE, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{os.path.basename(path)}:{lineno}"
                try:
                    case = json.loads(line)
                except json.JSONDecodeError as e:
                    errors.append(f"{where}: not valid JSON: {e}")
                    continue
                missing = [k for k in ("id", "class", "cmd", "exit") if k not in case]
                if missing:
                    errors.append(f"{where}: missing fields {missing}")
                    continue
                if case["class"] not in CLASSES:
                    errors.append(f"{where}: class {case['class']!r} is not one of {CLASSES}")
                    continue
                if case["id"] in seen:
                    errors.append(f"{where}: duplicate id {case['id']}")
                    continue
                seen.add(case["id"])
                case["_where"] = where
                cases.append(case)
    return cases, errors


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def snapshot(case_dir, rels):
    out = {}
    for rel in rels:
        p = os.path.join(case_dir, rel)
        if os.path.islink(p) or not os.path.exists(p):
            out[rel] = ("missing",)
        elif os.path.isfile(p):
            st = os.lstat(p)
            out[rel] = ("file", digest(p), st.st_mode)
        else:
            st = os.lstat(p)
            out[rel] = ("special", st.st_mode, st.st_ino)
    return out


def temp_leftovers(case_dir):
    found = []
    for root, dirs, files in os.walk(case_dir):
        for name in files + dirs:
            if ".qc-tmp-" in name or re.search(r"\.tmp-\d+$", name):
                found.append(os.path.relpath(os.path.join(root, name), case_dir))
    return found


def can_mount_tmpfs():
    if os.geteuid() != 0:
        return "not root: mounting a small tmpfs needs CAP_SYS_ADMIN"
    probe = tempfile.mkdtemp(prefix="qc-tmpfs-probe-")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe], capture_output=True, text=True)
        if r.returncode != 0:
            return f"mount -t tmpfs failed: {r.stderr.strip() or r.returncode}"
        subprocess.run(["umount", probe], capture_output=True)
        return None
    except FileNotFoundError:
        return "no mount command"
    finally:
        os.rmdir(probe)


def needs_reason(case, env, tmpfs_reason):
    need = case.get("needs")
    if not need:
        return None
    if need == "shared":
        return None if os.path.isdir(env["SHARED"]) else f"needs ../shared ({env['SHARED']}), absent"
    if need == "tmpfs":
        return tmpfs_reason
    if need == "root":
        return None if os.geteuid() == 0 else "needs root"
    if need == "nonroot":
        return None if os.geteuid() != 0 else "runs as root: permission checks do not apply"
    return f"unknown need {need!r}"


def run_shell(cmd, cwd, env, timeout):
    """Runs `cmd` with bash in its own process group; returns (rc, output, timed_out)."""
    p = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode("utf-8", "replace"), False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = p.communicate()
        return p.returncode, out.decode("utf-8", "replace"), True


def run_case(case, base_env, tmpfs_reason, verbose):
    """Returns (status, message): status is 'pass', 'fail' or 'skip'."""
    reason = needs_reason(case, base_env, tmpfs_reason)
    if reason:
        return "skip", reason
    case_dir = tempfile.mkdtemp(prefix="qc-hostile-")
    env = dict(base_env, CASE=case_dir)
    try:
        for step in case.get("setup", []):
            rc, out, timed_out = run_shell(step, case_dir, env, case.get("timeout", 60))
            if timed_out or rc != 0:
                return "fail", f"setup step failed (exit {rc}{', timed out' if timed_out else ''}): {step}\n{out[-2000:]}"
        rels = case.get("unchanged", [])
        before = snapshot(case_dir, rels)
        timeout = case.get("timeout", 60)
        rc, out, timed_out = run_shell(case["cmd"], case_dir, env, timeout)
        problems = []
        if timed_out:
            problems.append(f"hang: still running after {timeout} s (killed)")
        elif rc < 0 or rc >= 128 and case["exit"] < 128:
            sig = -rc if rc < 0 else rc - 128
            problems.append(f"crash: died of signal {SIGNAL_NAMES.get(sig, sig)}")
        if not timed_out and rc != case["exit"] and not problems:
            problems.append(f"expected exit {case['exit']}, found exit {rc}")
        for frag in case.get("stderr", []):
            if frag not in out:
                problems.append(f"expected the message to contain {frag!r}")
        after = snapshot(case_dir, rels)
        for rel in rels:
            if before[rel] != after[rel]:
                problems.append(f"data loss: {rel} changed ({before[rel][0]} -> {after[rel][0]})")
        left = temp_leftovers(case_dir)
        if left:
            problems.append(f"temporary files left behind: {left}")
        if problems:
            tail = out.strip()[-1500:]
            return "fail", "; ".join(problems) + (f"\n    output: {tail}" if tail else "\n    output: (none)")
        return "pass", out.strip()[-400:] if verbose else ""
    finally:
        subprocess.run(["bash", "-c", f"umount -l {case_dir}/* 2>/dev/null; chmod -R u+rwx {case_dir} 2>/dev/null"],
                       capture_output=True)
        shutil.rmtree(case_dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qc", required=True, help="the qconform binary")
    ap.add_argument("--filter", default="", help="run only cases whose id contains this")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()

    qc = os.path.abspath(args.qc)
    if not os.access(qc, os.X_OK):
        print(f"hostile: {qc}: not an executable qconform binary")
        return 2
    src = os.path.dirname(os.path.dirname(HERE))
    base_env = dict(os.environ)
    base_env.update(QC=qc, DATA=os.path.join(HERE, "data"), SRC=src,
                    SHARED=os.path.normpath(os.path.join(src, "..", "shared")),
                    CC=os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc",
                    LC_ALL="C", TZ="UTC")
    cases, errors = load_cases()
    for e in errors:
        print(f"FAIL suite: {e}")
    cases = [c for c in cases if args.filter in c["id"]]
    tmpfs_reason = can_mount_tmpfs() if any(c.get("needs") == "tmpfs" for c in cases) else None

    totals = collections.defaultdict(lambda: collections.Counter())
    failed = skipped = passed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [(c, pool.submit(run_case, c, base_env, tmpfs_reason, args.verbose)) for c in cases]
        for case, fut in futures:
            status, message = fut.result()
            totals[case["class"]][status] += 1
            if status == "fail":
                failed += 1
                print(f"FAIL {case['id']} [{case['class']}] ({case['_where']}): {message}")
            elif status == "skip":
                skipped += 1
                print(f"SKIPPED {case['id']}: {message}")
            else:
                passed += 1
                if args.verbose:
                    print(f"ok   {case['id']}" + (f"\n    {message}" if message else ""))
    print("by class:")
    for cls in CLASSES:
        t = totals[cls]
        if sum(t.values()):
            print(f"  {cls:<11} {sum(t.values()):>4} cases: {t['pass']} passed, {t['fail']} failed, {t['skip']} skipped")
    failed += len(errors)
    line = f"hostile: {passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
