"""Sandbox launcher: isolate, limit, drop privileges, then run the harness (stdlib only).

Run as ``python -I -S launcher.py '<json config>'`` in a new session (its own process group), with
a scrubbed environment, in one of two modes:

- harness (config key ``harness``; :class:`mintrl.sandbox.Sandbox`): the program's JSON
  arrives on stdin and is passed through to the harness;
- program (config key ``argv``; :class:`mintrl.env.shell.session.ShellSession`): ``argv`` is
  exec'd instead, with the launcher's stdin, stdout and stderr (e.g. a long-lived ``bash`` reading
  commands on a pipe) and, with config key ``pass_fds`` (``[[target, source], ...]``: inherited
  descriptor numbers), each ``source`` as its descriptor ``target`` (e.g. the shell's status
  channel as fd 3). This file is never imported by the package:
  it runs as a fresh, single-threaded process so that ``unshare``/``fork``/``setuid`` are safe.

Threat model: whatever runs inside is hostile (a policy's code or shell commands, optimising its
reward). It may run any code as the sandbox uid, within the limits: read what the sandbox shows,
write its private tmpfs folders, start processes, execute any syscall the filter lets through
(machine code included, e.g. through ``ctypes``). It must not: see the host's files beyond the
system folders (task files, answers, the project, ``/srv``, ``/work``, ``/root``, ``/home``,
``/sys``, the host's ``/proc`` and devices), write anything the host keeps, reach the network,
signal or see processes outside, gain privileges (setuid programs, capabilities, a user namespace
where it would be uid 0), hold more memory than its cap, or outlive the run. Each isolation the OS
refuses is recorded in the status file (the ``isolation`` dict), never assumed.

Steps:

1. ``unshare`` new network, PID, mount and IPC namespaces (root: directly; otherwise inside a new
   user namespace when the kernel allows unprivileged ones).
2. Cgroups (root): a memory cgroup of its own capped at ``limits.memory_total_bytes`` (default:
   ``address_space_bytes``) over every process of the sandbox, its tmpfs files included
   (``isolation.memory_cgroup``; the status says when the OOM killer fired), and a cpu cgroup
   allowed ``limits.cpu_cores`` cores (default 1) of CPU time per wall-clock second, weighted like
   any sibling (``isolation.cpu_cgroup``): cgroup v2 where the launcher's cgroup offers the
   controller, else the v1 hierarchy. A process that moves to another session or group stays in
   them. Without a memory cgroup the only bound is ``address_space_bytes`` per process times
   ``processes`` (RLIMIT_AS x RLIMIT_NPROC); without a cpu cgroup, CPU time is bounded by
   ``cpu_s`` per process (RLIMIT_CPU) and the wall clock, and nothing stops the sandbox's processes
   from taking every core meanwhile (non-root launchers, machines without a cpu controller).
3. ``fork``: the child is PID 1 of the new PID namespace, so when it exits or is killed the kernel
   kills every process the program started, whatever session or group they moved to; it waits until
   the parent has moved it into the cgroup.
4. Child: private mounts, every host mount remounted read-only; with ``visible`` and ``new_root``: a
   new root on a small tmpfs holding read-only binds of the ``visible`` host paths only (``/dev``: a
   few harmless devices) with every installed package's folder (``hidden``: ``site-packages``,
   ``dist-packages``) covered by an empty read-only tmpfs, a fresh ``/proc``, size-capped ``tmpfs`` on ``/tmp``, ``/var/tmp``,
   ``/dev/shm`` (and ``tmpfs_dirs``, e.g. ``/root`` and ``/home`` for a shell's tasks), then
   ``pivot_root`` into it with the host's mount tree detached (``chroot`` where pivot_root fails)
   and the new root itself read-only; the working directory ``/tmp/work`` lives on the private
   ``/tmp`` and vanishes with the namespace. Resource limits; the capability bounding set emptied,
   ``setgroups([])``/``setgid``/``setuid`` to the unprivileged sandbox uid (root only);
   a new anonymous session keyring (not the trainer's); parent-death signal SIGKILL; ``no_new_privs`` (setuid programs gain nothing); a seccomp filter
   refusing new user namespaces (``unshare``/``clone`` with ``CLONE_NEWUSER``, ``setns``,
   ``clone3``), the keyring syscalls (``add_key``, ``request_key``, ``keyctl``) and every syscall of a
   foreign ABI (i386 ``int 0x80``, x32); ``exec`` of the harness (``python -I -S``: no
   site-packages on its path) or of ``argv``.
5. Parent: waits up to the wall-clock limit (or until it gets SIGTERM: the caller ends the run
   early), then SIGKILLs the child and its process group, removes the cgroup, and writes a status
   file (wait status, timeout flag, isolation report) into a directory only it can write.

**Writable root** (config key ``writable_root``: ``{"uid_base": <first host uid of a range of
65536>, "private": [host paths to hide]}``; root only; for programs such as a task's init script
that write anywhere, e.g. ``mkdir /working``, ``useradd``): the program runs as uid 0 of a user
namespace whose uids and gids 0..65535 are the host's ``uid_base`` .. ``uid_base + 65535`` (no
privilege on the host), on a root it may change, and everything it writes vanishes with the
sandbox. Before step 1 the launcher (host root) makes that user namespace through a throwaway
child and writes its maps (:func:`_root_user_namespace`). In step 4 the child, still host root,
mounts a fresh ``/proc`` of the sandbox's PID namespace and, for each visible folder, an idmapped,
read-only clone (the host's root-owned files appear owned by the namespace's root) on a staging
tmpfs; then it joins the user namespace as its root, in a new mount namespace owned by it, and
builds the new root: a writable tmpfs of ``tmp_bytes`` holding an overlay per visible folder (lower
layer: the idmapped clone; upper layer on another tmpfs of ``tmp_bytes`` outside the new root), the
same ``/dev`` nodes, ``/proc`` bound from the stage, the ``hidden`` folders and the private tmpfs
folders as above (:func:`_writable_new_root`). It must ``pivot_root`` (no ``chroot`` fallback), which
leaves the stage and the host's tree out of reach. In the overlays, what a user with no privilege
cannot read on the host (the ``private`` list and a fresh scan of ``/etc``: keys, ``0600``
configuration) is emptied and the password files' hashes are replaced by ``*``
(:func:`_mask_private`), so that the namespace's root reads no more of the host than the default
mode's sandbox uid. The program keeps only a container's capabilities (:data:`ROOT_CAPABILITIES`:
not ``CAP_SYS_ADMIN``, so no mount, no ``umount`` of a hidden folder, no file handles; not
``SYS_PTRACE``, ``NET_ADMIN``, ``MKNOD``, ``SYS_RESOURCE``, ``DAC_READ_SEARCH``), as root of a
namespace that owns no network, PID or IPC namespace (the host's ``/proc/sys`` stays read-only to
it) and with the same limits, cgroups, keyring, ``no_new_privs`` and seccomp filter. Where any step
is refused (not root, no idmapped mounts or overlays in user namespaces, a bad ``uid_base``), the
sandbox does not start: its PID 1 writes why on stderr and exits 125 (never a read-only fallback).

**State checks** (program mode, config key ``control_fd``: a socket inherited by this parent only,
closed in the child before anything else, so that no process of the sandbox ever holds it): a check
of the sandbox's final state as AgentBench runs it after the agent's last turn
(``ShellSession.run_checks``). On a request (8-byte length, JSON ``{"scripts": [[language, text],
...], "answer", "timeout_s", "max_output_bytes"}``) the parent opens the sandbox's mount and user
namespaces from its PID 1 (descriptors keep them), SIGKILLs PID 1 (the kernel kills every other
process of the PID namespace and waits for them: nothing the agent started runs during the check),
reaps it, and runs each script in turn (:func:`_run_check_chain`): a process of its own (host root)
clones the host's folders of programs, libraries and loader configuration (the config's
``writable_root.pristine``: folders, files and where the host's links in them lead; idmapped
through the sandbox's user namespace), joins the sandbox's mount namespace, makes a copy of it owned
by the host's user namespace (nothing inside may change its mounts) and there binds the clones over
the agent's copies, restores the host's root-level links (``/lib64 -> usr/lib64``), covers the
hidden and private folders again and ``/proc`` with a read-only tmpfs (no procfs), makes the root's
own tmpfs read-only (:func:`_check_view`); everything else (``/home``, ``/root``, ``/etc`` otherwise,
``/var``, ``/tmp``, ``/usr/local/bin``, what the agent made) is the agent's final state. The script
then runs as PID 1 of a new PID namespace (no process it starts may signal it; all die with it) in
the sandbox's cgroups, as the sandbox's root (writable root: :data:`ROOT_CAPABILITIES`) or uid
(default: no capability, only ``/proc`` covered: the system folders were the host's, read-only),
with its limits, ``no_new_privs``, the seccomp filter plus ``ptrace``, ``process_vm_readv`` and
``process_vm_writev`` refused (:data:`CHECK_SYSCALLS`), ``PATH`` = :data:`CHECK_PATH` and the host's
interpreter by absolute path (``bash -c text -- *params``, ``python3 -c text *params``; ``params``:
the answer, then each earlier script's stdout), killed at ``timeout_s``. The parent replies
``{"results": [{"exit_code", "stdout", "timed_out"}, ...]}`` (the chain stops at the first exit code
that is not 0) or ``{"error": why}``; the exit codes it reports are its own ``waitpid``'s.
"""

import ctypes
import errno
import json
import os
import resource
import select
import shutil
import signal
import stat
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
MNT_DETACH = 2
MOUNT_OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": 1024,
    "nodiratime": 2048,
    "relatime": 1 << 21,
    "strictatime": 1 << 24,
}
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 24, 38, 22, 2
# per architecture: seccomp's AUDIT_ARCH, the syscall numbers of (unshare, clone, setns, clone3), that of
# pivot_root, and the lowest number of a second ABI on the same arch (x32 on x86_64, refused whole)
ARCHES = {
    "x86_64": (0xC000003E, (272, 56, 308, 435), 155, 0x40000000),
    "aarch64": (0xC00000B7, (97, 220, 268, 435), 41, None),
}
# per architecture: the syscall numbers of (add_key, request_key, keyctl), refused whole: the kernel's
# keyrings are per uid, not per namespace, so a row could leave a value in its slot uid's user keyring
# for a later row to read, or read the session keyring it inherited from the trainer
KEYRING_SYSCALLS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}
# per architecture: the syscall numbers of (ptrace, process_vm_readv, process_vm_writev), refused to a state
# check's processes: no program the agent left can read or write the memory of the check's interpreter
CHECK_SYSCALLS = {"x86_64": (101, 310, 311), "aarch64": (117, 270, 271)}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")  # the only host devices a sandbox sees
DEVICE_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
CGROUP_PREFIX = "mintrl-sandbox-"
# the new mount API (the same numbers on every architecture): open_tree, move_mount, mount_setattr
OPEN_TREE_NR, MOVE_MOUNT_NR, MOUNT_SETATTR_NR = 428, 429, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_EMPTY_PATH, AT_FDCWD, MOVE_MOUNT_F_EMPTY_PATH = 1, 0o2000000, 0x1000, -100, 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 1, 2, 4, 0x00100000
ROOT_IDS = 65536  # uids and gids 0..65535 of a writable root's user namespace, each on its own host id
# the capabilities a writable root's programs keep (a container runtime's default set, less MKNOD and
# NET_RAW): CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE,
# SYS_CHROOT, AUDIT_WRITE, SETFCAP; every other one (SYS_ADMIN: mount, umount; SYS_PTRACE, NET_ADMIN,
# DAC_READ_SEARCH, SYS_RESOURCE, ...) is out of the bounding set
ROOT_CAPABILITIES = frozenset((0, 1, 3, 4, 5, 6, 7, 8, 10, 18, 29, 31))
# a writable root's copies of the host's password files: every password field (hash) replaced by "*"
SHADOW_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-")

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


# -- cgroups (run by the launcher parent, as root) ----------------------------------------------------


def _cgroup_parents():
    """``{hierarchy: folder}`` of the launcher's own cgroup in each hierarchy that may hold a sandbox's
    cgroup: ``"v2"`` (the unified one), ``"memory"`` and ``"cpu"`` (cgroup v1)."""
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else ["v2"]:
                own[name] = path
    points = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            tail = fields[fields.index("-") + 1 :]
            if tail[0] == "cgroup2":
                points.setdefault("v2", (fields[3], fields[4]))
            elif tail[0] == "cgroup":
                for name in ("memory", "cpu"):
                    if name in tail[2].split(","):
                        points.setdefault(name, (fields[3], fields[4]))
    parents = {}
    for key in ("v2", "memory", "cpu"):
        if key in own and key in points:
            mount_root, point = points[key]
            path, mount_root = own[key], mount_root.rstrip("/")
            if path == mount_root or path.startswith(mount_root + "/"):
                parents[key] = point + path[len(mount_root) :]
    return parents


def _remove_cgroup(folder, tries=50):
    """Remove an (empty) cgroup folder, retrying while the kernel still releases it."""
    for _ in range(tries):
        try:
            os.rmdir(folder)
            return
        except FileNotFoundError:
            return
        except OSError as err:
            if err.errno != errno.EBUSY:
                return
            time.sleep(0.01)


def _remove_stale_cgroups(parent):
    """Remove the empty cgroups that launchers killed by SIGKILL left under ``parent``."""
    for name in os.listdir(parent):
        if name.startswith(CGROUP_PREFIX) and name[len(CGROUP_PREFIX) :].isdigit():
            try:
                os.kill(int(name[len(CGROUP_PREFIX) :]), 0)
            except ProcessLookupError:
                _remove_cgroup(os.path.join(parent, name), tries=1)
            except OSError:
                pass


def _controlled_cgroup(parent, settings, made):
    """This launcher's cgroup under ``parent`` (made once, kept in ``made``) with ``settings``
    (``[(file, value), ...]``; the first file is required, the others are written where they
    exist). Returns the folder, or None where the hierarchy refuses (the folder is then removed
    if this call made it)."""
    folder = os.path.join(parent, f"{CGROUP_PREFIX}{os.getpid()}")
    new = folder not in made
    try:
        if new:
            _remove_stale_cgroups(parent)
            os.mkdir(folder, 0o700)
            made.append(folder)
        for k, (name, value) in enumerate(settings):
            if k == 0 or os.path.exists(os.path.join(folder, name)):
                with open(os.path.join(folder, name), "w") as f:
                    f.write(str(value))
        return folder
    except OSError:
        if new and folder in made:
            made.remove(folder)
            _remove_cgroup(folder)
        return None


def _sandbox_cgroups(memory_bytes, cpu_cores):
    """Cgroups of the sandbox next to the launcher's own (root only): a memory cgroup capped at
    ``memory_bytes`` (swap included) and a cpu cgroup allowed ``cpu_cores`` cores of CPU time per
    wall-clock second (CFS bandwidth: ``cpu.max`` on cgroup v2, ``cpu.cfs_quota_us`` on v1), each in
    the unified hierarchy where it offers the controller, else in the v1 one. Every process of the
    sandbox is in them, whatever session or process group it moves to; sibling cgroups share the
    machine by equal weight, so a sandbox of 30 busy processes gets no more than one of a single
    process. Returns ``({"memory": folder | None, "cpu": folder | None}, folders to remove)``."""
    period = 100_000  # microseconds
    quota = max(1000, int(round(cpu_cores * period)))
    wanted = {
        "memory": (
            ("v2", (("memory.max", memory_bytes), ("memory.swap.max", 0))),
            ("memory", (("memory.limit_in_bytes", memory_bytes), ("memory.memsw.limit_in_bytes", memory_bytes))),
        ),
        "cpu": (
            ("v2", (("cpu.max", f"{quota} {period}"),)),
            ("cpu", (("cpu.cfs_period_us", period), ("cpu.cfs_quota_us", quota))),
        ),
    }
    made, chosen = [], {"memory": None, "cpu": None}
    try:
        parents = _cgroup_parents()
    except (OSError, ValueError, IndexError):
        return chosen, made
    for controller, options in wanted.items():
        for hierarchy, settings in options:
            if hierarchy in parents:
                chosen[controller] = _controlled_cgroup(parents[hierarchy], settings, made)
                if chosen[controller] is not None:
                    break
    return chosen, made


def _oom_kills(folder):
    """How many processes the OOM killer ended in the cgroup (0 where it does not say)."""
    for name in ("memory.events", "memory.oom_control"):
        try:
            with open(os.path.join(folder, name)) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return 0


# -- the child's filesystem ----------------------------------------------------------------------------


def _bind_read_only(source, target):
    _mount(source, target, None, MS_BIND | MS_REC)
    try:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
    except OSError:
        pass  # a bind of a mount made read-only above stays read-only


def _populate_dev(target):
    """Fill ``target`` (the sandbox's empty ``/dev``) with the host's :data:`DEVICES`, bound one by one
    read-only, and the :data:`DEVICE_LINKS` into ``/proc/self/fd``."""
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{target}/{name}", "w").close()
            _bind_read_only(f"/dev/{name}", f"{target}/{name}")
    for name, link in DEVICE_LINKS.items():
        os.symlink(link, f"{target}/{name}")


def _new_root(top, visible, hidden=()):
    """Build the sandbox's root at ``top`` (an empty folder): a small tmpfs holding read-only bind
    mounts of the ``visible`` host paths (system binaries and libraries, ``/etc``, the interpreter's
    binary, library and standard-library folders) and nothing else of the host; a visible symlink
    (``/bin -> usr/bin``) is copied as a link; ``/dev`` gets only :data:`DEVICES` (bound one by one)
    and the ``/proc/self/fd`` links; each ``hidden`` folder under them (installed packages) is
    covered by an empty read-only tmpfs. Returns ``top``.

    Raises:
        OSError: a mount failed (the sandbox must not start with a hidden folder in reach).
    """
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
        if path != "/dev":
            _bind_read_only(path, target)
            continue
        _populate_dev(target)
    for path in hidden:
        target = top + path
        if os.path.isdir(target) and os.path.realpath(target).startswith(top + "/"):
            _mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")
    return top


def _enter_root(top, writable=False):
    """Make ``top`` the root of this mount namespace and detach the host's mount tree (``pivot_root``;
    ``chroot`` where the kernel refuses it, except for a ``writable`` root), then make the root's own
    tmpfs read-only (unless ``writable``). Returns whether ``pivot_root`` did it.

    Raises:
        OSError: the host's tree could not be detached after a ``pivot_root``, or a ``writable`` root
            could not be pivoted into (its root keeps ``CAP_SYS_CHROOT``, which leaves a ``chroot``);
            the sandbox must not start with the host's tree in reach.
    """
    number = ARCHES.get(os.uname().machine, (None, None, None, None))[2]
    old = top + "/.old-root"
    os.mkdir(old, 0o700)
    pivoted = number is not None and libc.syscall(ctypes.c_long(number), top.encode(), old.encode()) == 0
    if not pivoted and writable:
        raise OSError(ctypes.get_errno(), "pivot_root into the writable root refused")
    if pivoted:
        os.chdir("/")
        if libc.umount2(b"/.old-root", MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), "umount2 of the host's root")
        os.rmdir("/.old-root")
    else:  # the host's mounts stay in this namespace, outside the chroot
        os.rmdir(old)
        os.chroot(top)
        os.chdir("/")
    if not writable:
        _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return pivoted


# -- a writable root (root only): overlays on idmapped host folders, inside a user namespace -----------


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _root_user_namespace(uid_base):
    """A new user namespace whose uids and gids 0..65535 are the host's ``uid_base`` ..
    ``uid_base + 65535`` (its root: ``uid_base``, no privilege on the host), as a descriptor
    (close-on-exec). A throwaway child makes it (``unshare(CLONE_NEWUSER)``), this process (host root,
    in the initial user namespace) writes its maps and opens it, then the child is reaped; the
    descriptor keeps the namespace. Call before the process enters new namespaces (its ``/proc``
    must show the child).

    Raises:
        OSError: the kernel refused the user namespace or its maps.
    """
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(hold_w)
            made = _unshare(CLONE_NEWUSER)
            os.write(ready_w, b"u" if made else str(ctypes.get_errno()).encode())
            os.read(hold_r, 1)  # until the parent has opened the namespace
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(hold_r)
    try:
        answer = os.read(ready_r, 16)
        if answer != b"u":
            code = int(answer) if answer.isdigit() else errno.EPERM
            raise OSError(code, f"unshare(CLONE_NEWUSER): {os.strerror(code)}")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(f"0 {uid_base} {ROOT_IDS}\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(hold_w)  # the child's read returns: it exits
        os.waitpid(pid, 0)


def _writable_root_namespace(cfg, root):
    """``(descriptor, None)`` of the user namespace of ``cfg["writable_root"]`` (see
    :func:`_root_user_namespace`), or ``(None, why)`` where it cannot be made: not root, a
    ``uid_base`` that is not an integer in [65536, 2**32 - 1 - 65536], a refusal of the kernel."""
    if not root:
        return None, "a writable root needs the launcher to run as root"
    uid_base = cfg["writable_root"].get("uid_base")
    if type(uid_base) is not int or not ROOT_IDS <= uid_base <= 2**32 - 1 - ROOT_IDS:
        return None, f"writable_root.uid_base {uid_base!r} is not an integer in [65536, 2**32 - 65537]"
    try:
        return _root_user_namespace(uid_base), None
    except OSError as exc:
        return None, f"the kernel refused a writable root's user namespace: {exc}"


def _idmapped_clone(path, target, userns_fd):
    """Attach at ``target`` a read-only, nosuid, nodev clone of the mount at host ``path`` (that
    mount only: an overlay's lower layer does not cross into submounts) whose files' owners are
    mapped through ``userns_fd``'s user namespace (host root's files: owned by its root).

    Raises:
        OSError: the kernel or the file system refused (no idmapped mounts).
    """

    def call(number, *args):  # a syscall of the new mount API; raises OSError(what) where it fails
        *args, what = args
        result = libc.syscall(ctypes.c_long(number), *args)
        if result < 0:
            raise OSError(ctypes.get_errno(), what)
        return result

    here, flags = ctypes.c_int(AT_FDCWD), ctypes.c_uint(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    fd = call(OPEN_TREE_NR, here, path.encode(), flags, f"open_tree {path}")
    try:
        attr = _MountAttr(MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, userns_fd)
        size, empty = ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint(AT_EMPTY_PATH)
        call(
            MOUNT_SETATTR_NR, ctypes.c_int(fd), b"", empty, ctypes.byref(attr), size, f"mount_setattr (idmap) of {path}"
        )
        moved = ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH)
        call(MOVE_MOUNT_NR, ctypes.c_int(fd), b"", here, target.encode(), moved, f"move_mount to {target}")
    finally:
        os.close(fd)


def _enter_root_user_namespace(userns_fd):
    """Join the user namespace (``setns``) as its root (uid and gid 0, no supplementary groups), then a
    new mount namespace that it owns (a copy of this one, with every mount of the host locked)."""
    if libc.setns(ctypes.c_int(userns_fd), ctypes.c_int(CLONE_NEWUSER)) != 0:
        raise OSError(ctypes.get_errno(), "setns into the writable root's user namespace")
    os.close(userns_fd)
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    if not _unshare(CLONE_NEWNS):
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) in the user namespace")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)


def _writable_new_root(stage, visible, hidden, userns_fd, tmp_bytes):
    """Build a writable root at ``stage + "/root"`` (``stage``: an empty folder, in this process's
    private mount namespace) and return its path relative to the working directory, ``stage``, where
    the process stays (the namespace's root may not search the host folders above it); this process
    ends as root of ``userns_fd``'s user namespace, in a new mount namespace owned by it.

    As host root: a small tmpfs on ``stage``; a fresh ``/proc`` of the sandbox's PID namespace at
    ``stage/proc`` (the PID namespace belongs to the host's user namespace: it cannot be mounted from
    inside); for each visible folder, an idmapped read-only clone at ``stage/lower/<n>``
    (:func:`_idmapped_clone`). Then, as the namespace's root: a tmpfs of ``tmp_bytes`` on
    ``stage/scratch`` holding every overlay's upper and work folders, another of ``tmp_bytes`` as the
    new root, on it an overlay per visible folder (writes go to the scratch tmpfs: the host's
    folders stay as they are), a visible symlink (``/bin -> usr/bin``) copied, ``/dev`` with only
    :data:`DEVICES` (bound one by one) and the ``/proc/self/fd`` links, ``/proc`` bound from the
    stage, and each ``hidden`` folder under the overlays covered by an empty read-only tmpfs. Once
    the process has pivoted into the new root, the stage (lower layers, scratch tmpfs) is out of
    reach.

    Raises:
        OSError: a step failed (the sandbox must not start).
    """
    _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    os.chdir(stage)  # overlay options name the layers relative to it (no comma or colon of the path)
    for name in ("root", "scratch", "proc", "lower"):
        os.mkdir(name, 0o755)
    _mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    folders = []  # (index, host path) of each overlaid folder
    for path in visible:
        if path != "/dev" and os.path.isdir(path) and not (os.path.islink(path) and os.path.dirname(path) == "/"):
            n = len(folders)
            os.mkdir(f"lower/{n}", 0o755)
            _idmapped_clone(path, f"lower/{n}", userns_fd)
            folders.append((n, path))
    _enter_root_user_namespace(userns_fd)
    _mount("tmpfs", "scratch", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_bytes},mode=700")
    top = "root"
    _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_bytes},mode=755")
    for n, path in folders:
        os.mkdir(f"scratch/upper{n}", 0o755)
        os.mkdir(f"scratch/work{n}", 0o755)
        os.makedirs(top + path, mode=0o755, exist_ok=True)
        layers = f"lowerdir=lower/{n},upperdir=scratch/upper{n},workdir=scratch/work{n},userxattr"
        _mount("overlay", top + path, "overlay", MS_NOSUID | MS_NODEV, layers)
    for path in visible:
        if os.path.islink(path) and os.path.dirname(path) == "/" and not os.path.lexists(top + path):
            os.symlink(os.readlink(path), top + path)
    if "/dev" in visible and os.path.isdir("/dev"):
        os.makedirs(top + "/dev", mode=0o755, exist_ok=True)
        _populate_dev(top + "/dev")
    os.mkdir(top + "/proc", 0o555)
    _mount("proc", top + "/proc", None, MS_BIND | MS_REC)
    for path in hidden:
        target = top + path
        if os.path.isdir(target) and not _through_symlink(top, path):
            _mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")
    return top


def _through_symlink(top, path):
    """Whether a folder of ``path`` (absolute) under ``top`` is a symlink (which a mount would follow
    out of the new root)."""
    current = top
    for part in path.strip("/").split("/"):
        current += "/" + part
        if os.path.islink(current):
            return True
    return False


def scrubbed_shadow(text):
    """``text`` of a ``shadow`` or ``gshadow`` file with every password field (the second, a hash or
    a lock mark) replaced by ``*``; every other field, line and line end unchanged."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        fields = line.split(":")
        if len(fields) > 1:
            fields[1] = "*"
            lines[k] = ":".join(fields)
    return "\n".join(lines)


def _rewrite(path, transform):
    """Replace the text of the regular file ``path`` (not a symlink) by ``transform(text)``, keeping its
    owner and mode; nothing where ``path`` is not a regular file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    with os.fdopen(fd, "r+", encoding="utf-8", errors="surrogateescape", newline="") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return
        text = transform(f.read())
        f.seek(0)
        f.truncate()
        f.write(text)


def _mask_private(paths):
    """In the writable root (after the pivot, as its root): hide what the host keeps from users with no
    privilege: :data:`SHADOW_FILES` scrubbed (:func:`scrubbed_shadow`; ``useradd`` still works), every
    other file of ``paths`` emptied, every folder of ``paths`` emptied (its mode and owner kept), so
    that the namespace's root, which owns the host's files, reads no more of them than the sandbox uid
    of the default mode. Each change lands on the overlay's upper layer.

    Raises:
        OSError: a path could not be hidden (the sandbox must not start).
    """
    for path in SHADOW_FILES:
        _rewrite(path, scrubbed_shadow)
    for path in dict.fromkeys(paths):
        if path in SHADOW_FILES:
            continue
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISREG(mode):
            os.close(os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK))
        elif stat.S_ISDIR(mode):
            for entry in os.scandir(path):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)


# -- privileges ----------------------------------------------------------------------------------------


def _drop_capability_bounds(keep=frozenset()):
    """Drop every capability but ``keep`` (numbers) from the bounding set (root, before setuid or
    exec): no exec can ever regain one, and a root's exec gets exactly ``keep``.

    Raises:
        OSError: a capability could not be dropped.
    """
    for cap in range(64):
        if cap in keep:
            continue
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                break  # past the last capability this kernel knows
            raise OSError(ctypes.get_errno(), f"dropping capability {cap} from the bounding set")


def _join_new_session_keyring():
    """Join a new anonymous session keyring (``keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)``), so that
    the keyring the launcher inherited from the trainer (a login's or a service's) is no longer this
    process's session keyring; the seccomp filter then refuses every keyring syscall. Returns
    whether it was joined (False on an architecture without its number here, or where the kernel
    has no keyrings)."""
    numbers = KEYRING_SYSCALLS.get(os.uname().machine)
    if numbers is None:
        return False
    return libc.syscall(ctypes.c_long(numbers[2]), ctypes.c_long(1), ctypes.c_void_p(None)) >= 0


def _refuse_namespaces(extra=()):
    """A seccomp filter (``no_new_privs`` already set): ``unshare`` and ``clone`` asking for a new
    user namespace fail with EPERM, ``setns`` fails with EPERM, ``clone3`` (whose flags a filter
    cannot read) with ENOSYS, so that libc falls back to ``clone``; the keyring syscalls (``add_key``,
    ``request_key``, ``keyctl``) fail with EPERM, so that no row stores or reads a key (a uid's keyring
    outlives the run and is shared by every row of that uid); every syscall of another ABI
    (i386 through ``int 0x80``, x32: numbers a filter of this ABI would not see) fails with EPERM;
    so does each syscall number of ``extra`` (a state check refuses ``ptrace``, ``process_vm_readv``
    and ``process_vm_writev``: :data:`CHECK_SYSCALLS`). Returns whether it is installed (False on an architecture without its syscall numbers here)."""
    arch, numbers, _, second_abi = ARCHES.get(os.uname().machine, (None, None, None, None))
    if arch is None:
        return False
    unshare_nr, clone_nr, setns_nr, clone3_nr = numbers
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    program = [
        (ld_abs, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch),
        (ret, 0, 0, eperm),  # a foreign ABI
        (ld_abs, 0, 0, 0),  # seccomp_data.nr
        *([(jge, 0, 1, second_abi), (ret, 0, 0, eperm)] if second_abi is not None else []),  # x32
        (jeq, 0, 1, clone3_nr),
        (ret, 0, 0, enosys),
        (jeq, 0, 1, setns_nr),
        (ret, 0, 0, eperm),
        *[op for nr in KEYRING_SYSCALLS[os.uname().machine] for op in ((jeq, 0, 1, nr), (ret, 0, 0, eperm))],
        *[op for nr in extra for op in ((jeq, 0, 1, nr), (ret, 0, 0, eperm))],
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


def _place_descriptors(pairs):
    """Give the program each inherited descriptor ``source`` as descriptor ``target`` (``pairs``:
    ``[[target, source], ...]``), closing the sources: every source is first moved above all targets,
    so that no placement overwrites a source still to be placed."""
    top = max([3, *(t for t, _ in pairs), *(s for _, s in pairs)]) + 1
    moved = []
    for target, source in pairs:
        high = os.dup2(source, top + len(moved), inheritable=True)
        os.close(source)
        moved.append((target, high))
    for target, high in moved:
        os.dup2(high, target, inheritable=True)
        os.close(high)


def _set_limits(lim):
    """The resource limits of ``lim`` (the config's ``limits``) on this process and what it starts."""
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


def _writable_root_refusal(cfg, isolation, writable):
    """Why a writable root cannot be built here (None where it can): its user namespace was refused,
    or a namespace it needs is missing, or the config has no new root."""
    if writable["refused"]:
        return writable["refused"]
    if not (isolation["mount"] and isolation["pid"]):
        return "a writable root needs new mount and PID namespaces, which the kernel refused"
    if not (cfg.get("visible") and cfg.get("new_root")):
        return "a writable root needs visible paths and new_root in the config"
    return None


def _child(cfg, isolation, root, report_fd, harness_source, writable=None):
    """PID 1 of the sandbox (or a plain child): set up and exec the harness (or ``cfg["argv"]``
    when ``harness_source`` is None); with ``writable`` (the config's ``writable_root`` and its user
    namespace's descriptor, or why it was refused), as root of that namespace in a writable root,
    or not at all. Never returns."""
    try:
        workdir = cfg["workdir"]
        if writable is not None:
            refusal = _writable_root_refusal(cfg, isolation, writable)
            if refusal:
                raise RuntimeError(refusal)
            _set_limits(cfg["limits"])  # before setns: raising a hard limit needs the host's CAP_SYS_RESOURCE
        if isolation["mount"]:
            # a mount namespace of its own: the launcher parent must keep seeing the real /tmp
            if not _unshare(CLONE_NEWNS):
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
            read_only = _read_only_mounts()  # before the writable tmpfs mounts below
            os.write(report_fd, b"r" if read_only else b"-")
            top = ""  # where the sandbox's / is built (the host's / when no new root is made)
            if writable is not None:  # /proc included
                args = (cfg["visible"], cfg.get("hidden", ()), writable["userns_fd"], cfg["tmp_bytes"])
                top = _writable_new_root(cfg["new_root"], *args)
            else:
                if cfg.get("visible") and cfg.get("new_root"):
                    top = _new_root(cfg["new_root"], cfg["visible"], cfg.get("hidden", ()))
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
                os.write(report_fd, b"v" + (b"p" if _enter_root(top, writable=writable is not None) else b""))
            if writable is not None:
                _mask_private(writable.get("private", ()))
                os.write(report_fd, b"w")
            workdir = "/tmp/work"
            os.mkdir(workdir, 0o700)
        if root and writable is None:
            os.chown(workdir, cfg["uid"], cfg["gid"])
        if writable is None:
            _set_limits(cfg["limits"])
        if writable is not None:  # stays the namespace's root, with the capabilities of a container
            _drop_capability_bounds(keep=ROOT_CAPABILITIES)
        elif root:
            _drop_capability_bounds()
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(cfg["uid"])
        if _join_new_session_keyring():  # after setuid: the new keyring belongs to the sandbox uid
            os.write(report_fd, b"k")
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid, which clears it
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:  # setuid binaries (su, mount) gain nothing
            os.write(report_fd, b"n")
            if _refuse_namespaces():
                os.write(report_fd, b"s")
        os.chdir(workdir)
        env = dict(cfg["env"], HOME=workdir, TMPDIR=workdir)
        if harness_source is None:
            _place_descriptors(cfg.get("pass_fds", []))  # last: they may replace the report pipe's descriptor
            os.execve(cfg["argv"][0], cfg["argv"], env)
        # the harness goes in as source text: its file may sit under a path the new mounts hide
        # -I: no environment variables, no user site; -S: no site-packages on the path at all
        os.execve(cfg["python"], [cfg["python"], "-I", "-S", "-c", harness_source], env)
    except BaseException as exc:  # noqa: BLE001 - report and exit with the launcher's own code
        os.write(2, f"mintrl-sandbox launcher: {type(exc).__name__}: {exc}\n".encode())
    os._exit(125)


# -- state checks: the check chain on the sandbox's final tree, after every process of it has died ------

# the agent's own programs come last: a name the host has is always the host's program
CHECK_PATH = "/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin"
CHECK_INTERPRETERS = {"bash": "/usr/bin/bash", "python": "/usr/bin/python3"}
CHECK_STAGE = "/proc"  # the check's view has no procfs: a read-only tmpfs (the stage of its mounts) covers it
MAX_REQUEST_BYTES = 64 << 20


def _setns(fd, kind, what):
    if libc.setns(ctypes.c_int(fd), ctypes.c_int(kind)) != 0:
        raise OSError(ctypes.get_errno(), f"setns into {what}")


def _host_clone(path, userns_fd):
    """A detached read-only, nosuid, nodev clone of the host's ``path`` (a folder or a file; that mount
    only), idmapped through ``userns_fd`` when given, as a descriptor (close-on-exec).

    Raises:
        OSError: the kernel refused.
    """
    here, flags = ctypes.c_int(AT_FDCWD), ctypes.c_uint(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    fd = libc.syscall(ctypes.c_long(OPEN_TREE_NR), here, path.encode(), flags)
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"open_tree {path}")
    idmap = MOUNT_ATTR_IDMAP if userns_fd is not None else 0
    attr = _MountAttr(idmap | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, userns_fd or 0)
    size, empty = ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint(AT_EMPTY_PATH)
    if libc.syscall(ctypes.c_long(MOUNT_SETATTR_NR), ctypes.c_int(fd), b"", empty, ctypes.byref(attr), size) != 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, f"mount_setattr of {path}")
    return fd


def _pristine_clones(pristine, userns_fd):
    """``([(path, descriptor, is_folder)], [(path, link)], [path])``: a detached clone
    (:func:`_host_clone`) of each host folder of ``pristine["folders"]``, file of
    ``pristine["files"]`` and path of ``pristine["links"]`` (where the host's links in those folders
    lead) that exists as one (not a symlink), the target of each folder or file that is a symlink on
    the host (``/lib64 -> usr/lib64``), and the files the host lacks. Made as host root in the
    launcher's mount namespace, where the host's tree is in reach."""
    clones, links, missing = [], [], []
    for path in (*pristine["folders"], *pristine["files"], *pristine.get("links", ())):
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path) and path not in pristine["files"]:
            clones.append((path, _host_clone(path, userns_fd), True))
        elif os.path.isfile(path) and path not in pristine["folders"]:
            clones.append((path, _host_clone(path, userns_fd), False))
        elif path in pristine["files"]:
            missing.append(path)
    return clones, links, missing


def _remove(path):
    """Remove whatever is at ``path`` (a folder with its content, a file, a link); nothing if absent."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _mount_point(path, folder):
    """Make ``path`` of the agent's tree a ``folder`` (or a file) that is no symlink, replacing what the
    agent left there otherwise, so that a mount on it lands there and nowhere else.

    Raises:
        OSError: a folder above ``path`` is a symlink (the check's view cannot be built).
    """
    parent = os.path.dirname(path)
    if os.path.realpath(parent) != parent:
        raise OSError(errno.ELOOP, f"a folder above {path} is a symlink in the agent's tree")
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode) or stat.S_ISDIR(mode) != folder:
            _remove(path)
    except FileNotFoundError:
        pass
    if not os.path.lexists(path):
        if folder:
            os.mkdir(path, 0o755)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))


def _attach(fd, target):
    moved = ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH)
    here = ctypes.c_int(AT_FDCWD)
    if libc.syscall(ctypes.c_long(MOVE_MOUNT_NR), ctypes.c_int(fd), b"", here, target.encode(), moved) != 0:
        raise OSError(ctypes.get_errno(), f"move_mount to {target}")


def _bind_empty(empty, path):
    """Bind the read-only empty file ``empty`` over the file ``path``."""
    _mount(empty, path, None, MS_BIND)
    _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _check_view(cfg, clones, links, missing, writable):
    """Turn this mount namespace (a copy of the sandbox's final one, owned by the host's user
    namespace, so that nothing inside may change a mount of it) into a state check's view (the agent's
    tree changed as its root, the namespace's uid 0, would: file system uid and gid ``uid_base``): each clone
    attached over the agent's folder or file, each root-level symlink of the host restored, each
    missing loader file an empty one, every hidden (package) folder and every private host entry
    under the clones covered again, the root's own tmpfs made read-only where the sandbox had a
    ``writable`` root (a top-level link stays the host's), and a read-only tmpfs over ``/proc``: no
    procfs at all. In default mode (nothing cloned) only ``/proc`` is covered: the sandbox's system
    folders were the host's, read-only.

    Raises:
        OSError: a step failed (the check does not run).
    """
    _mount("tmpfs", CHECK_STAGE, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,mode=755")
    empty = CHECK_STAGE + "/empty"
    os.close(os.open(empty, os.O_WRONLY | os.O_CREAT, 0o444))
    if writable:  # what this process writes in the agent's tree is its root's (a file of host root would not map)
        libc.setfsgid(ctypes.c_uint(cfg["writable_root"]["uid_base"]))
        libc.setfsuid(ctypes.c_uint(cfg["writable_root"]["uid_base"]))
    for path, link in links:
        if os.path.lexists(path) and not (os.path.islink(path) and os.readlink(path) == link):
            _remove(path)
        if not os.path.lexists(path):
            os.symlink(link, path)
    for path, fd, folder in clones:
        _mount_point(path, folder)
        _attach(fd, path)
        os.close(fd)
    for path in missing:
        _mount_point(path, False)
        _bind_empty(empty, path)
    under = lambda p: any(p == c or p.startswith(c + "/") for c, _, _ in clones)  # noqa: E731
    for path in cfg.get("hidden", ()):
        if under(path) and os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")
    for path in (cfg.get("writable_root") or {}).get("private", ()):
        if under(path) and os.path.lexists(path) and not os.path.islink(path):
            if os.path.isdir(path):
                _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")
            else:
                _bind_empty(empty, path)
    if writable:
        _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount(None, CHECK_STAGE, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _check_process(cfg, namespaces, argv, env, workdir, out_w, go_r, pid_w):
    """The process of one check script (host root, forked by the launcher parent after the sandbox
    died). Builds the check's view in a mount namespace of its own (:func:`_check_view`) from the
    sandbox's pinned ``namespaces`` (``{"mnt": fd, "user": fd | None}``), makes a new PID namespace,
    waits until the parent has put it in the sandbox's cgroups (``go_r``), then forks the script as
    that namespace's PID 1 (no process inside may signal it, and every process it starts dies when
    it ends): the sandbox's identity (a writable root's namespace root with :data:`ROOT_CAPABILITIES`,
    else the sandbox uid with none), its limits, ``no_new_privs``, the seccomp filter with
    :data:`CHECK_SYSCALLS` refused, parent-death SIGKILL, stdout on ``out_w``, stdin and stderr on
    ``/dev/null``; its PID (this namespace's) goes out on ``pid_w``. Exits with the script's exit status
    (128 + the signal that killed it). Never returns.
    """
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.read(go_r, 1) != b"g":  # the launcher is gone, or could not place this process in the cgroups
            os._exit(125)
        userns = namespaces.get("user")
        clones, links, missing = [], [], []
        if userns is not None:  # the sandbox had a writable root: the agent may have changed any folder
            clones, links, missing = _pristine_clones(cfg["writable_root"]["pristine"], userns)
        _setns(namespaces["mnt"], CLONE_NEWNS, "the sandbox's mount namespace")
        if not _unshare(CLONE_NEWNS):
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) of the check")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _check_view(cfg, clones, links, missing, writable=userns is not None)
        if not _unshare(CLONE_NEWPID):
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID) of the check")
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(alive_w)
            os.close(pid_w)
            _exec_check(cfg, userns, argv, env, workdir, out_w, alive_r)
        os.write(pid_w, str(pid).encode())  # the parent kills it at the time limit: its namespace dies with it
        os.close(pid_w)
        os.close(out_w)
        os.close(alive_r)
        _, status = os.waitpid(pid, 0)
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
    except BaseException as exc:  # noqa: BLE001 - the check did not run: its own exit code
        os.write(2, f"mintrl-sandbox launcher (check): {type(exc).__name__}: {exc}\n".encode())
    os._exit(125)


def _exec_check(cfg, userns, argv, env, workdir, out_w, alive_r):
    """PID 1 of a check's PID namespace: drop to the sandbox's identity and exec ``argv`` (``alive_r``:
    a pipe whose other end only the check process holds). Never returns."""
    err = 2
    try:
        err = os.dup(2)  # close-on-exec: where this process reports a failure before the exec
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(null, 2)
        _set_limits(cfg["limits"])  # before setns: raising a hard limit needs the host's CAP_SYS_RESOURCE
        if userns is not None:
            _setns(userns, CLONE_NEWUSER, "the writable root's user namespace")
            os.setgroups([])
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            _drop_capability_bounds(keep=ROOT_CAPABILITIES)
        else:
            _drop_capability_bounds()
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(cfg["uid"])
        _join_new_session_keyring()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([alive_r], [], [], 0)[0]:  # the check process (its parent, unseen here) is gone
            os._exit(125)
        os.close(alive_r)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or not _refuse_namespaces(
            CHECK_SYSCALLS.get(os.uname().machine, ())
        ):
            raise OSError(errno.EPERM, "no_new_privs or the seccomp filter refused")
        try:
            os.chdir(workdir)
        except OSError:
            os.chdir("/")
        os.execve(argv[0], argv, env)
    except BaseException as exc:  # noqa: BLE001
        os.write(err, f"mintrl-sandbox launcher (check): {type(exc).__name__}: {exc}\n".encode())
    os._exit(125)


def _check_argv(language, text, params):
    """``argv`` of one check script as AgentBench runs it (``bash -c script -- *params``, ``python3 -c
    script *params``), its interpreter by the absolute path of the host's program.

    Raises:
        ValueError: another language, or a NUL character in the script or a parameter.
    """
    if language not in CHECK_INTERPRETERS:
        raise ValueError(f"a check script in {language!r} (only bash and python run)")
    interpreter = CHECK_INTERPRETERS[language]
    argv = [interpreter, "-c", text, *(["--"] if language == "bash" and params else []), *params]
    if any("\0" in a for a in argv):
        raise ValueError("a NUL character in a check script or its parameters")
    return argv


def _run_check_script(cfg, namespaces, cgroups, argv, timeout_s, max_output):
    """Run one check script (:func:`_check_process`) with a wall-clock limit of ``timeout_s``
    seconds; returns ``{"exit_code": int | None (timed out, or its process could not start),
    "stdout": its first ``max_output`` bytes as text (UTF-8, surrogateescape), "timed_out": bool}``."""
    env = {
        "PATH": CHECK_PATH,
        "LANG": "C.UTF-8",
        "HOME": "/tmp/work",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }
    out_r, out_w = os.pipe()
    go_r, go_w = os.pipe()
    pid_r, pid_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(go_w)
        os.close(pid_r)
        _check_process(cfg, namespaces, argv, env, "/tmp/work", out_w, go_r, pid_w)
    os.close(out_w)
    os.close(go_r)
    os.close(pid_w)
    for folder in cgroups:
        try:
            with open(os.path.join(folder, "cgroup.procs"), "w") as f:
                f.write(str(pid))
        except OSError:
            pass
    os.write(go_w, b"g")
    os.close(go_w)
    pidfd = os.pidfd_open(pid)
    deadline = time.monotonic() + timeout_s
    data, timed_out, ended = bytearray(), False, False
    while not ended or out_r is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            _kill_check(pid, pid_r)
            break
        ready, _, _ = select.select([fd for fd in (out_r, None if ended else pidfd) if fd is not None], [], [], left)
        if pidfd in ready:
            ended = True
        if out_r in ready:
            chunk = os.read(out_r, 1 << 16)
            if not chunk:
                os.close(out_r)
                out_r = None
            elif len(data) < max_output:
                data += chunk[: max_output - len(data)]
    if out_r is not None:
        os.close(out_r)
    os.close(pidfd)
    os.close(pid_r)
    _, status = os.waitpid(pid, 0)  # after its script's PID namespace is gone, every process of it reaped
    code = None if timed_out or not os.WIFEXITED(status) else os.WEXITSTATUS(status)
    return {"exit_code": code, "stdout": bytes(data).decode("utf-8", "surrogateescape"), "timed_out": timed_out}


def _kill_check(pid, pid_r):
    """SIGKILL the script of the check process ``pid``, PID 1 of its PID namespace, whose PID the check
    process sent on ``pid_r`` (the kernel then kills every process of that namespace, and the check
    process exits once they are gone); the check process itself where the script has not started."""
    os.set_blocking(pid_r, False)
    try:
        script = int(os.read(pid_r, 32) or b"0")
    except (BlockingIOError, ValueError):
        script = 0
    try:
        os.kill(script if script > 0 else pid, signal.SIGKILL)  # the check process reaps the script: no reuse
    except ProcessLookupError:
        pass


def _run_check_chain(cfg, namespaces, cgroups, request):
    """AgentBench's ``_evaluate_by_check_scripts`` on the sandbox's final tree: each script of
    ``request["scripts"]`` (``[language, text]``) with the parameters ``[answer, stdout of each
    earlier script]``, until one exits non-zero. Returns the reply: ``{"results": [{"exit_code",
    "stdout", "timed_out"}, ...]}`` (one per script run) or ``{"error": why}``."""
    params = [str(request["answer"])]
    results = []
    for language, text in request["scripts"]:
        try:
            argv = _check_argv(language, text, params)
        except ValueError as exc:
            results.append({"exit_code": None, "stdout": "", "timed_out": False, "error": str(exc)})
            break
        result = _run_check_script(
            cfg, namespaces, cgroups, argv, float(request["timeout_s"]), int(request["max_output_bytes"])
        )
        results.append(result)
        if result["exit_code"] != 0:
            break
        params.append(result["stdout"])
    return {"results": results}


def _read_message(fd):
    """One length-prefixed (8 bytes, big-endian) JSON message from the socket ``fd``; None at its end."""
    head = b""
    while len(head) < 8:
        chunk = os.read(fd, 8 - len(head))
        if not chunk:
            return None
        head += chunk
    size = int.from_bytes(head, "big")
    if size > MAX_REQUEST_BYTES:
        return None
    body = bytearray()
    while len(body) < size:
        chunk = os.read(fd, min(1 << 20, size - len(body)))
        if not chunk:
            return None
        body += chunk
    return json.loads(body.decode("utf-8", "surrogateescape"))


def _write_message(fd, message):
    body = json.dumps(message).encode("utf-8", "surrogateescape")
    data = memoryview(len(body).to_bytes(8, "big") + body)
    while data:
        data = data[os.write(fd, data) :]


def _wait_sandbox(pid, control_fd):
    """Wait for the sandbox's PID 1 to end, or for a check request on ``control_fd`` (None: none can
    come). On a request: pin the sandbox's mount and user namespaces (descriptors), SIGKILL its PID 1
    (the kernel kills every other process of its PID namespace and waits for them) and reap it.
    Returns ``(wait4's result, request or None, {"mnt": fd, "user": fd | None} or why it failed)``."""
    pidfd = os.pidfd_open(pid) if control_fd is not None else None
    while pidfd is not None:
        try:
            ready, _, _ = select.select([pidfd, control_fd], [], [])
        except InterruptedError:
            continue
        if pidfd in ready:
            break
        request = _read_message(control_fd)
        if request is None:  # the session went away: nothing more will come
            break
        namespaces = {}
        try:
            own_user = os.readlink("/proc/self/ns/user")
            namespaces["mnt"] = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            user = os.readlink(f"/proc/{pid}/ns/user")
            if user != own_user:
                namespaces["user"] = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            namespaces = f"the sandbox ended before its check: {exc}"
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(pidfd)
        return os.wait4(pid, 0), request, namespaces
    if pidfd is not None:
        os.close(pidfd)
    return os.wait4(pid, 0), None, None


def _answer_check(cfg, control_fd, request, namespaces, cgroups):
    """Run the check chain of ``request`` (:func:`_run_check_chain`) and send the reply on
    ``control_fd``; an error reply where the sandbox's namespaces were not pinned or a step failed."""
    # the sandbox's PID is reaped (no signal may go to it now); a SIGTERM (the session gave up) ends this
    # process, and with it (parent-death SIGKILL) the check's process and its PID namespace
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if isinstance(namespaces, str):
        reply = {"error": namespaces}
    else:
        try:
            # this process's children went to the sandbox's (now dead) PID namespace: back to its own
            own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(own, CLONE_NEWPID, "the launcher's own PID namespace")
            finally:
                os.close(own)
            reply = _run_check_chain(cfg, namespaces, cgroups, request)
        except Exception as exc:  # noqa: BLE001 - reported to the session, which scores the check failed
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        for fd in namespaces.values():
            os.close(fd)
    try:
        _write_message(control_fd, reply)
    except OSError:
        pass


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
    writable = None
    if cfg.get("writable_root") is not None:  # its user namespace, made while /proc is still the host's
        userns_fd, refused = _writable_root_namespace(cfg, root)
        writable = dict(cfg["writable_root"], userns_fd=userns_fd, refused=refused)
    isolation = _isolate(root)
    isolation["separate_user"] = root  # root drops to a per-slot uid; others already run unprivileged
    lim = cfg["limits"]
    cgroups, made = ({"memory": None, "cpu": None}, [])
    if root:
        memory_bytes = lim.get("memory_total_bytes", lim["address_space_bytes"])
        cgroups, made = _sandbox_cgroups(memory_bytes, float(lim.get("cpu_cores", 1.0)))
    if cfg.get("new_root"):
        os.makedirs(cfg["new_root"], exist_ok=True)  # before the child makes every mount read-only
    report_r, report_w = os.pipe()  # the child reports each isolation it made (one letter each)
    go_r, go_w = os.pipe()  # the child starts once it is in the cgroup
    control_fd = cfg.get("control_fd")  # the session's end of a check request, never the sandbox's
    pid = os.fork()
    if pid == 0:
        if control_fd is not None:
            os.close(control_fd)
        os.close(report_r)
        os.close(go_w)
        if os.read(go_r, 1) != b"g":  # the parent is gone: nobody would bound this sandbox
            os._exit(125)
        os.close(go_r)
        _child(cfg, isolation, root, report_w, harness_source, writable)
    os.close(report_w)
    if writable is not None and writable["userns_fd"] is not None:
        os.close(writable["userns_fd"])  # only the child joins it
    os.close(go_r)
    for _, source in cfg.get("pass_fds", []):
        os.close(source)  # only the sandbox holds them (e.g. the shell's status channel's write end)
    joined = set()
    for folder in made:
        try:
            with open(os.path.join(folder, "cgroup.procs"), "w") as f:
                f.write(str(pid))
            joined.add(folder)
        except OSError:
            pass
    isolation["memory_cgroup"] = cgroups["memory"] in joined
    isolation["cpu_cgroup"] = cgroups["cpu"] in joined
    os.write(go_w, b"g")
    os.close(go_w)
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
    signal.setitimer(signal.ITIMER_REAL, lim["wall_s"])
    (_, status, usage), request, namespaces = _wait_sandbox(pid, control_fd)
    signal.setitimer(signal.ITIMER_REAL, 0)
    reported = os.read(report_r, 16)
    isolation["read_only"] = b"r" in reported
    isolation["visible_only"] = b"v" in reported  # a new root of the visible paths only
    isolation["host_root_detached"] = b"p" in reported  # pivot_root, the host's mounts detached
    isolation["no_new_privs"] = b"n" in reported
    isolation["no_user_namespaces"] = b"s" in reported
    isolation["own_session_keyring"] = b"k" in reported
    if writable is not None:
        isolation["writable_root"] = b"w" in reported  # root of its own user namespace, writes on overlays
    report = {
        "status": status,
        "timed_out": timed_out,
        "wall_s": time.monotonic() - start,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "isolation": isolation,
        "oom_kills": _oom_kills(cgroups["memory"]) if isolation["memory_cgroup"] else 0,
    }
    if request is not None:
        _answer_check(cfg, control_fd, request, namespaces, made)
    for folder in made:
        _remove_cgroup(folder)  # every process of the sandbox is gone with its PID 1
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
