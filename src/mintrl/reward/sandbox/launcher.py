"""Sandbox launcher: isolate, limit, drop privileges, then run the harness (stdlib only).

Run as ``python -I -S launcher.py '<json config>'`` in a new session (its own process group), with
a scrubbed environment, in one of two modes:

- harness (config key ``harness``; :class:`mintrl.reward.sandbox.Sandbox`): the program's JSON
  arrives on stdin and is passed through to the harness;
- program (config key ``argv``; :class:`mintrl.env.shell.session.ShellSession`): ``argv`` is
  exec'd instead, with the launcher's stdin, stdout and stderr (e.g. a long-lived ``bash`` reading
  commands on a pipe). This file is never imported by the package: it runs
as a fresh, single-threaded process so that ``unshare``/``fork``/``setuid`` are safe.

Steps (each isolation that the OS refuses is recorded, never silently assumed):

1. ``unshare`` new network, PID, mount and IPC namespaces (root: directly; otherwise inside a new
   user namespace when the kernel allows unprivileged ones).
2. ``fork``: the child is PID 1 of the new PID namespace, so when it exits or is killed the kernel
   kills every process the program started, whatever session or group they moved to.
3. Child: private mounts, a fresh ``/proc``, size-capped ``tmpfs`` on ``/tmp``, ``/var/tmp`` and
   ``/dev/shm`` (the working directory ``/tmp/work`` lives there and vanishes with the namespace),
   every other mount remounted read-only, and (when not root) the caller's home hidden under a tmpfs;
   (optional ``tmpfs_dirs``: more folders hidden under a private writable tmpfs, e.g. ``/root`` and
   ``/home`` for a shell's tasks); resource limits; ``setgroups([])``/``setgid``/``setuid`` to the
   unprivileged sandbox uid (root only); parent-death signal SIGKILL; ``exec`` of the harness or of
   ``argv``.
4. Parent: waits up to the wall-clock limit (or until it gets SIGTERM: the caller ends the run
   early), then SIGKILLs the child and its process group, and writes a status file (wait status,
   timeout flag, isolation report) into a directory only it can write.
"""

import ctypes
import json
import os
import resource
import signal
import sys
import time

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    16384,
    1 << 18,
)
MOUNT_OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": 1024,
    "nodiratime": 2048,
    "relatime": 1 << 21,
    "strictatime": 1 << 24,
}
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 38, 22, 2

libc = ctypes.CDLL(None, use_errno=True)


def _unshare(flags):
    return libc.unshare(ctypes.c_int(flags)) == 0


def _mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}")


def _read_only_mounts():
    """Remount every mount of this (private) mount namespace read-only, keeping its other flags
    (a user namespace may not clear them). Returns whether all remounts succeeded."""
    ok = True
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:
        target = fields[4].encode().decode("unicode_escape")  # \040 = space
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in fields[5].split(","):
            flags |= MOUNT_OPTION_FLAGS.get(option, 0)
        try:
            _mount(None, target, None, flags)
        except OSError:
            ok = False
    return ok


def _isolate(root):
    """Enter new namespaces; return which ones were made."""
    flags = CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC  # the child makes a second mount ns
    if root and _unshare(flags):
        return {"network": True, "pid": True, "mount": True, "user_namespace": False}
    if not root:
        uid, gid = os.getuid(), os.getgid()
        if _unshare(CLONE_NEWUSER | flags):
            for path, text in (
                ("/proc/self/setgroups", "deny"),
                ("/proc/self/uid_map", f"{uid} {uid} 1"),
                ("/proc/self/gid_map", f"{gid} {gid} 1"),
            ):
                with open(path, "w") as f:
                    f.write(text)
            return {"network": True, "pid": True, "mount": True, "user_namespace": True}
    # last resort: whatever single namespaces are allowed (each may fail)
    return {"network": _unshare(CLONE_NEWNET), "pid": False, "mount": False, "user_namespace": False}


def _new_root(top, visible):
    """Build the sandbox's root at ``top`` (an empty folder): a small tmpfs holding read-only bind
    mounts of the ``visible`` host paths (system binaries and libraries, ``/etc``, ``/dev``, the
    interpreter's prefix) and nothing else of the host; a visible symlink (``/bin -> usr/bin``) is
    copied as a link. Returns ``top``."""
    _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path in visible:
        target = top + path
        if os.path.islink(path) and os.path.dirname(path) == "/":
            if not os.path.lexists(target):
                os.symlink(os.readlink(path), target)
            continue
        if not os.path.isdir(path):
            continue
        os.makedirs(target, mode=0o755, exist_ok=True)
        _mount(path, target, None, MS_BIND | MS_REC)
        try:
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
        except OSError:
            pass  # a bind of a mount made read-only above stays read-only
    return top


def _refuse_namespaces():
    """A seccomp filter (``no_new_privs`` already set): ``unshare`` and ``clone`` asking for a new
    user namespace fail with EPERM, ``setns`` fails with EPERM, and ``clone3`` (whose flags a filter
    cannot read) with ENOSYS, so that libc falls back to ``clone``. Returns whether it is installed
    (False on an architecture without its syscall numbers here)."""
    arch, numbers = {
        "x86_64": (0xC000003E, (272, 56, 308, 435)),
        "aarch64": (0xC00000B7, (97, 220, 268, 435)),
    }.get(os.uname().machine, (None, None))
    if arch is None:
        return False
    unshare_nr, clone_nr, setns_nr, clone3_nr = numbers
    ld_abs, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    program = [
        (ld_abs, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch),
        (ret, 0, 0, allow),
        (ld_abs, 0, 0, 0),  # seccomp_data.nr
        (jeq, 0, 1, clone3_nr),
        (ret, 0, 0, enosys),
        (jeq, 0, 1, setns_nr),
        (ret, 0, 0, eperm),
        (jeq, 1, 0, unshare_nr),
        (jeq, 0, 3, clone_nr),
        (ld_abs, 0, 0, 16),  # args[0], its low 32 bits: the flags of unshare and clone
        (jset, 0, 1, CLONE_NEWUSER),
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
    ]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*[Filter(*op) for op in program])
    prog = Program(len(program), filters)
    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0


def _child(cfg, isolation, root, report_fd, harness_source):
    """PID 1 of the sandbox (or a plain child): set up and exec the harness (or ``cfg["argv"]``
    when ``harness_source`` is None). Never returns."""
    try:
        workdir = cfg["workdir"]
        if isolation["mount"]:
            # a mount namespace of its own: the launcher parent must keep seeing the real /tmp
            if not _unshare(CLONE_NEWNS):
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
            read_only = _read_only_mounts()  # before the writable tmpfs mounts below
            os.write(report_fd, b"r" if read_only else b"-")
            top = ""  # where the sandbox's / is built (the host's / when no new root is made)
            if cfg.get("visible") and cfg.get("new_root"):
                top = _new_root(cfg["new_root"], cfg["visible"])
                os.write(report_fd, b"v")
            if isolation["pid"]:
                os.makedirs(top + "/proc", exist_ok=True)
                _mount("proc", top + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            home = None if root or top else cfg["caller_home"]  # the caller's own files: hidden
            extra = [d for d in cfg.get("tmpfs_dirs", ()) if d != "/"]
            for target in ("/tmp", "/var/tmp", "/dev/shm", *([home] if home and home != "/" else []), *extra):
                if top:
                    os.makedirs(top + target, mode=0o755, exist_ok=True)
                if os.path.isdir(top + target):
                    opts = f"size={cfg['tmp_bytes']},mode=1777"
                    _mount("tmpfs", top + target, "tmpfs", MS_NOSUID | MS_NODEV, opts)
            if top:
                os.chroot(top)
                os.chdir("/")
            workdir = "/tmp/work"
            os.mkdir(workdir, 0o700)
        if root:
            os.chown(workdir, cfg["uid"], cfg["gid"])
        lim = cfg["limits"]
        for name, value in (
            ("RLIMIT_CPU", lim["cpu_s"]),
            ("RLIMIT_AS", lim["address_space_bytes"]),
            ("RLIMIT_FSIZE", lim["file_size_bytes"]),
            ("RLIMIT_NPROC", lim["processes"]),
            ("RLIMIT_NOFILE", lim["open_files"]),
            ("RLIMIT_CORE", 0),
        ):
            hard = value + 1 if name == "RLIMIT_CPU" else value  # SIGXCPU at the soft limit, SIGKILL 1 s later
            resource.setrlimit(getattr(resource, name), (value, hard))
        if root:
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(cfg["uid"])
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid, which clears it
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:  # setuid binaries (su, mount) gain nothing
            os.write(report_fd, b"n")
            if _refuse_namespaces():
                os.write(report_fd, b"s")
        os.chdir(workdir)
        env = dict(cfg["env"], HOME=workdir, TMPDIR=workdir)
        if harness_source is None:
            os.execve(cfg["argv"][0], cfg["argv"], env)
        # the harness goes in as source text: its file may sit under a path the new mounts hide
        os.execve(cfg["python"], [cfg["python"], "-I", "-c", harness_source], env)
    except BaseException as exc:  # noqa: BLE001 - report and exit with the launcher's own code
        os.write(2, f"mintrl-sandbox launcher: {type(exc).__name__}: {exc}\n".encode())
    os._exit(125)


def main():
    cfg = json.loads(sys.argv[1])
    harness_source = None
    if "harness" in cfg:  # one path, or several whose texts run as one program (codec.py + a harness)
        paths = cfg["harness"] if isinstance(cfg["harness"], list) else [cfg["harness"]]
        texts = []
        for path in paths:
            with open(path) as f:
                texts.append(f.read())
        harness_source = "\n".join(texts)
    root = os.geteuid() == 0
    isolation = _isolate(root)
    isolation["separate_user"] = root  # root drops to a per-slot uid; others already run unprivileged
    if cfg.get("new_root"):
        os.makedirs(cfg["new_root"], exist_ok=True)  # before the child makes every mount read-only
    report_r, report_w = os.pipe()  # the child reports each isolation it made (one letter each)
    pid = os.fork()
    if pid == 0:
        os.close(report_r)
        _child(cfg, isolation, root, report_w, harness_source)
    os.close(report_w)
    timed_out = False

    def on_alarm(signum, frame):
        nonlocal timed_out
        timed_out = True
        try:
            os.kill(pid, signal.SIGKILL)  # PID 1 of the namespace: the kernel kills the rest
        except ProcessLookupError:
            pass

    def on_term(signum, frame):  # the caller ends the run: kill the sandbox, still reap it and report
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, cfg["limits"]["wall_s"])
    _, status, usage = os.wait4(pid, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    reported = os.read(report_r, 16)
    isolation["read_only"] = b"r" in reported
    isolation["visible_only"] = b"v" in reported  # a new root of the visible paths only
    isolation["no_new_privs"] = b"n" in reported
    isolation["no_user_namespaces"] = b"s" in reported
    report = {
        "status": status,
        "timed_out": timed_out,
        "wall_s": time.monotonic() - start,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "isolation": isolation,
    }
    with open(cfg["status_path"], "w") as f:
        json.dump(report, f)
    if not isolation["pid"]:
        # without a PID namespace, stray children that stayed in our process group die with it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    main()
