"""A writable root (launcher config ``writable_root``): a program runs as root of its own user namespace on
overlays of the host's folders, so that a task's init can write anywhere (``mkdir /working``,
``/usr/stock.log``, ``useradd``) as in a container; every command here is a real bash in the sandbox,
written as hostile where it tries to reach the host, to keep what it wrote, or to regain a privilege."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from shell_helpers import USERNS_ATTEMPTS, WRITABLE_ROOT_BASES, WRITABLE_ROOT_UIDS, sandbox_processes

from mintrl.sandbox import launch

LIMITS = dict(
    wall_s=20.0,
    cpu_s=10,
    address_space_bytes=1 << 30,
    file_size_bytes=16 << 20,
    processes=64,
    open_files=256,
    memory_total_bytes=512 << 20,
)
TMP_BYTES = 64 << 20
SHADOW_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-")
FAILED_START = 125 << 8  # the wait status of a sandbox whose PID 1 refused to start
# a container's capabilities (bits): CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4, KILL 5, SETGID 6, SETUID 7,
# SETPCAP 8, NET_BIND_SERVICE 10, SYS_CHROOT 18, AUDIT_WRITE 29, SETFCAP 31
CONTAINER_CAPS = f"{sum(1 << b for b in (0, 1, 3, 4, 5, 6, 7, 8, 10, 18, 29, 31)):016x}"
ISOLATION = ("network", "pid", "mount", "read_only", "visible_only", "host_root_detached", "no_new_privs")
ISOLATION += ("no_user_namespaces", "own_session_keyring", "memory_cgroup", "cpu_cgroup", "writable_root")


def config(folder: Path, script: str, uid_base: int | None = WRITABLE_ROOT_BASES[0]) -> dict:
    """The launcher config of ``bash -c script`` in a fresh run folder under ``folder``."""
    run_dir = tempfile.mkdtemp(dir=folder)
    os.mkdir(os.path.join(run_dir, "work"), 0o700)
    argv = ["/bin/bash", "-c", script]
    dirs = ("/root", "/home")
    return launch.launcher_config(
        run_dir, 65000, LIMITS, TMP_BYTES, argv=argv, tmpfs_dirs=dirs, writable_root_uid=uid_base
    )


def run(cfg: dict, **popen) -> tuple[str, str, dict]:
    """Run the sandbox of ``cfg`` to its end: ``(stdout, stderr, launcher status)``; no process of the
    writable-root uids is left."""
    proc = launch.start_launcher(cfg, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    out, err = proc.communicate(timeout=60)
    with open(cfg["status_path"]) as f:
        status = json.load(f)
    assert sandbox_processes(WRITABLE_ROOT_UIDS) == []
    return out.decode(), err.decode(), status


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_a_tasks_init_writes_anywhere_as_root_and_the_host_keeps_none_of_it(tmp_path):
    name = f"mintrl-wr-{secrets.token_hex(4)}"
    before = {p: digest(p) for p in ("/etc/passwd", "/etc/group", "/etc/shadow")}
    script = f"""
id -u; awk '{{print $1, $2, $3}}' /proc/self/uid_map; echo "$PATH"
mkdir /working && echo w > /working/y && cat /working/y
echo 1 > /usr/stock.log && cat /usr/stock.log
mkdir -p /var/k && echo k > /var/k/v && cat /var/k/v
echo x > /usr/{name} && cat /usr/{name}
useradd -m -u 4242 alice && id alice && stat -c '%U %G' /home/alice
touch /usr/f && chown alice:alice /usr/f && stat -c '%U:%G %u:%g' /usr/f
rm -rf /etc/skel && mkdir /etc/skel && ls -A /etc/skel | wc -l
cp /bin/bash /usr/rootsh && chmod 4755 /usr/rootsh && su alice -s /bin/bash -c '/usr/rootsh -p -c "id -u"'
"""
    out, err, status = run(config(tmp_path, script))
    assert out.splitlines() == [
        "0",
        f"0 {WRITABLE_ROOT_BASES[0]} 65536",  # root inside is the range's first host uid
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "w",
        "1",
        "k",
        "x",
        "uid=4242(alice) gid=4242(alice) groups=4242(alice)",
        "alice alice",
        "alice:alice 4242:4242",
        "0",  # a folder removed from the host's copy and made again is empty (an opaque overlay folder)
        "4242",  # a setuid-root copy of bash gives alice nothing (nosuid, no_new_privs)
    ], err
    assert status["status"] == 0
    assert {key: status["isolation"][key] for key in ISOLATION} == dict.fromkeys(ISOLATION, True)
    for path in ("/working", "/usr/stock.log", "/var/k", f"/usr/{name}", "/usr/f", "/usr/rootsh", "/home/alice"):
        assert not os.path.lexists(path), path
    assert {p: digest(p) for p in before} == before
    assert os.listdir("/etc/skel") != [] and "alice" not in Path("/etc/passwd").read_text()


def test_what_one_sandbox_wrote_is_gone_in_the_next_of_the_same_uids(tmp_path):
    name = f"mintrl-wr-{secrets.token_hex(4)}"
    write = f"echo x > /usr/{name} && echo 'ghost:x:4343:4343::/nonexistent:/bin/false' >> /etc/passwd && mkdir /working && touch /working/y && echo done"
    look = f"test -e /usr/{name}; echo $?; grep -c '^ghost:' /etc/passwd; test -e /working; echo $?"
    assert run(config(tmp_path, write))[0] == "done\n"
    assert run(config(tmp_path, look))[0] == "1\n0\n1\n"
    assert not os.path.exists(f"/usr/{name}") and "ghost:" not in Path("/etc/passwd").read_text()


def test_the_root_inside_cannot_mount_unmount_nest_namespaces_or_open_file_handles(tmp_path):
    hidden = [p for p in launch.hidden_paths() if p.startswith("/usr/")]
    assert hidden, "premise: the system Python has a package folder under /usr"
    script = f"""
grep -E '^Cap(Eff|Bnd)' /proc/self/status | cut -f2
for p in {hidden[0]} /usr /proc /; do umount "$p" 2>/dev/null; echo "umount $p $?"; umount -l "$p" 2>/dev/null; echo "umount -l $p $?"; done
ls -A {hidden[0]} | wc -l
mkdir -p /mnt && mount -t tmpfs x /mnt 2>/dev/null; echo "mount $?"
mount --bind /usr /mnt 2>/dev/null; echo "bind $?"
unshare -r true 2>/dev/null; echo "unshare $?"
mknod /tmp/mem c 1 1 2>/dev/null; echo "mknod $?"
python3 - <<'PY'
{USERNS_ATTEMPTS}
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
open("/tmp/h", "w").close()
handle = ctypes.create_string_buffer(8 + 128)
ctypes.c_uint.from_buffer(handle).value = 128
mount_id = ctypes.c_int()
libc.name_to_handle_at(-100, b"/tmp/h", handle, ctypes.byref(mount_id), 0)
print("open_by_handle_at", libc.open_by_handle_at(os.open("/tmp", os.O_RDONLY), handle, 0), ctypes.get_errno())
os.makedirs("/tmp/jail")
up = os.open("/", os.O_RDONLY)
os.chroot("/tmp/jail")
os.fchdir(up)
for _ in range(30):
    os.chdir("..")
os.chroot(".")
print("chroot escape", sorted(set(os.listdir("/")) & {{"work", "srv", "old_root", ".old-root", "scratch"}}))
PY
"""
    out = run(config(tmp_path, script))[0].splitlines()
    assert out[:2] == [CONTAINER_CAPS, CONTAINER_CAPS]
    assert out[2:10] == [f"umount{flag} {p} 32" for p in (hidden[0], "/usr", "/proc", "/") for flag in ("", " -l")]
    assert out[10:] == [
        "0",  # the package folder stays hidden
        "mount 32",
        "bind 32",
        "unshare 1",
        "mknod 1",
        "unshare -1 False",
        "x32 -1 False",
        "int80 -1 False",
        "open_by_handle_at -1 1",  # EPERM
        "chroot escape []",
    ]


@pytest.fixture()
def host_folder():
    """A folder outside every temporary folder, as a host's folder of a service: a public file, a
    file only its owner reads, one its group reads, and a folder only its owner enters."""
    folder = Path("/srv") / f"mintrl-test-{secrets.token_hex(4)}"
    (folder / "keys").mkdir(parents=True)
    for name, text, mode in (("public.txt", "public\n", 0o644), ("secret.txt", "s3cret\n", 0o600)):
        (folder / name).write_text(text)
        (folder / name).chmod(mode)
    (folder / "group.txt").write_text("grp\n")
    (folder / "group.txt").chmod(0o640)
    (folder / "keys" / "key.pem").write_text("KEY\n")
    (folder / "keys" / "key.pem").chmod(0o644)
    (folder / "keys").chmod(0o700)
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_the_host_keeps_its_secrets_its_proc_settings_and_every_other_folder(tmp_path, host_folder, task_file):
    shadows = [p for p in SHADOW_FILES if os.path.isfile(p)]
    assert {"/etc/shadow", "/etc/gshadow"} <= set(shadows), "premise: the host has password files"
    etc_private = [p for p in launch.private_paths(("/etc",)) if p not in SHADOW_FILES]
    script = f"""
for p in {" ".join(shadows)}; do cat "$p"; echo ---; done
for p in {" ".join(etc_private)}; do if [ -d "$p" ]; then echo "$p $(ls -A "$p" | wc -l)"; else echo "$p $(wc -c < "$p")"; fi; done
cd {host_folder} && for f in public.txt secret.txt group.txt; do echo "$f $(cat $f)"; done; ls -A keys | wc -l
v=$(cat /proc/sys/kernel/randomize_va_space); echo "$v" > /proc/sys/kernel/randomize_va_space 2>/dev/null; echo "sysctl $?"
echo 1 > /proc/sys/vm/drop_caches 2>/dev/null; echo "drop_caches $?"
if [ -e /proc/sysrq-trigger ]; then echo h > /proc/sysrq-trigger 2>/dev/null; echo "sysrq $?"; else echo "sysrq 1"; fi
head -c 1 /proc/kmsg >/dev/null 2>&1; echo "kmsg $?"
ls /srv; ls -A /home | wc -l
for p in /work /work/main {task_file} /old_root /sys; do test -e "$p"; echo "$p $?"; done
"""
    cfg = config(tmp_path, script)
    cfg["visible"].append(str(host_folder))
    cfg["writable_root"]["private"] += launch.private_paths((str(host_folder),))
    *copies, rest = run(cfg)[0].split("---\n")
    assert len(copies) == len(shadows)
    for inside, host in zip(copies, shadows):
        host_lines = Path(host).read_text().splitlines()
        assert "$" not in inside and len(inside.splitlines()) == len(host_lines) > 0
        for line, host_line in zip(inside.splitlines(), host_lines):
            fields, host_fields = line.split(":"), host_line.split(":")
            assert fields[1] == "*" and fields[:1] + fields[2:] == host_fields[:1] + host_fields[2:]
    assert rest.splitlines() == [
        *(f"{p} 0" for p in etc_private),  # every file or folder of /etc that others cannot read: emptied
        "public.txt public",
        "secret.txt ",
        "group.txt ",
        "0",
        "sysctl 1",
        "drop_caches 1",
        "sysrq 1",
        "kmsg 1",
        host_folder.name,  # the only folder of /srv in the sandbox: the visible one
        "0",
        "/work 1",
        "/work/main 1",
        f"{task_file} 1",
        "/old_root 1",
        "/sys 1",
    ]
    assert (host_folder / "secret.txt").read_text() == "s3cret\n"


def test_the_password_fields_are_scrubbed_and_every_other_field_kept():
    spec = importlib.util.spec_from_file_location("sandbox_launcher", launch.LAUNCHER)
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    text = "root:$6$salt$hash:19000:0:99999:7:::\nalice:!$y$j9T$abc:19500::::::\nadm:*::root,alice\n\nbad\n"
    assert (
        launcher.scrubbed_shadow(text) == "root:*:19000:0:99999:7:::\nalice:*:19500::::::\nadm:*::root,alice\n\nbad\n"
    )


def test_where_a_writable_root_cannot_be_made_the_sandbox_does_not_start(tmp_path):
    for bad in (0, 1000, 2**32 - 1):
        with pytest.raises(ValueError, match="writable_root_uid"):
            config(tmp_path, "true", uid_base=bad)
    # a uid_base that would map the namespace's root onto the host's root, bypassing launcher_config
    cfg = config(tmp_path, "echo ran")
    cfg["writable_root"]["uid_base"] = 0
    out, err, status = run(cfg)
    assert (out, status["status"], status["isolation"]["writable_root"]) == ("", FAILED_START, False)
    assert "writable_root.uid_base 0 is not an integer in [65536" in err
    # a launcher that is not root (the system Python: the project's interpreter is under /root), in a
    # run folder that user can reach
    shared = Path(tempfile.mkdtemp(prefix="mintrl-wr-"))
    shared.chmod(0o755)
    cfg = config(shared, "echo ran")
    run_dir = os.path.dirname(cfg["status_path"])
    for path in (run_dir, os.path.join(run_dir, "work")):
        os.chown(path, 65534, 65534)
    try:
        proc = subprocess.run(
            ["/usr/bin/python3", "-I", "-S", launch.LAUNCHER, json.dumps(cfg)],
            env=launch.SAFE_ENV,
            capture_output=True,
            timeout=60,
            user=65534,
            group=65534,
            extra_groups=[],
        )
        with open(cfg["status_path"]) as f:
            status = json.load(f)
    finally:
        shutil.rmtree(shared)
    assert (proc.stdout, status["status"], status["isolation"]["writable_root"]) == (b"", FAILED_START, False)
    assert b"a writable root needs the launcher to run as root" in proc.stderr


# ---------------------------------------------------------------- a shell session on a writable root

SESSION_INIT = "mkdir /working && echo 7 > /usr/stock.log && useradd -m bob && echo 123>/home/.tmp"


def test_a_shell_session_on_a_writable_root_keeps_its_state_between_commands_only():
    """ShellSession with ``writable_root``: the init (in its own process, as the namespace's root) writes
    anywhere and adds a user; the agent's commands see it and add more; a second session on the same
    uids starts from the host's tree again."""
    from shell_helpers import UID_BASE

    from mintrl.env.shell.session import ShellLimits, ShellSession

    limits = ShellLimits(wall_s=30.0, memory_mb=256, processes=64, writable_root=True)
    with pytest.raises(ValueError, match="env.writable_root needs the session's root_uids"):
        ShellSession(UID_BASE, limits, 4096)
    with ShellSession(UID_BASE, limits, 4096, init=SESSION_INIT, root_uids=WRITABLE_ROOT_BASES[1]) as shell:
        assert shell.init_result.exit_code == 0, shell.init_result.output
        seen = shell.run(
            "id -u; cat /usr/stock.log; id -un bob; test -e /home/.tmp && echo fd123; ls -d /working", 10.0
        )
        written = shell.run("echo 8 >> /usr/stock.log && tail -1 /usr/stock.log", 10.0)
    assert seen.output.splitlines() == ["0", "7", "bob", "fd123", "/working"]
    assert written.output.splitlines() == ["8"]
    with ShellSession(UID_BASE, limits, 4096, root_uids=WRITABLE_ROOT_BASES[1]) as fresh:
        gone = fresh.run("ls /usr/stock.log /working 2>&1 | wc -l; id bob 2>&1 | grep -c 'no such user'", 10.0)
    assert gone.output.splitlines() == ["2", "1"]
    assert not os.path.exists("/usr/stock.log") and not os.path.exists("/working")
    assert sandbox_processes(WRITABLE_ROOT_UIDS) == []


def test_an_agentbench_row_that_writes_the_system_loads_and_scores_on_a_writable_root(tmp_path):
    """A row whose init writes /usr and adds a user (refused on the read-only root) loads with
    ``root_uids`` and its reference command scores 1 in an environment with ``writable_root``; the
    shell judge keeps that command on the same state."""
    from shell_helpers import LOADER_UID, bash, item, make

    from mintrl.data.base import InvalidRow
    from mintrl.env.shell.loader import load_os_tasks
    from mintrl.judge.shell import ShellJudge

    row = {
        "description": "How many lines does /usr/stock.log have?",
        "create": {"init": "printf 'a\\nb\\nc\\n' > /usr/stock.log && useradd -m stockman"},
        "evaluation": {"check": [None, {"language": "python", "file": "check/integer-match.py"}],
                       "example": "wc -l < /usr/stock.log"},
    }  # fmt: skip
    path = tmp_path / "os.json"
    path.write_text(json.dumps([row]))
    with pytest.raises(InvalidRow, match="create.init"):
        load_os_tasks(str(path), uid=LOADER_UID)
    (entry,) = load_os_tasks(str(path), uid=LOADER_UID, root_uids=WRITABLE_ROOT_BASES[1])
    assert (entry["label"], entry["check"]) == ("3", "integer")
    env = make(writable_root=True, root_uid_base=WRITABLE_ROOT_BASES[0])
    try:
        env.reset([item(entry)])
        seen = env.step([0], [bash("wc -l < /usr/stock.log; id -un stockman")]).observations[0]
        assert "3\nstockman" in seen
        assert env.step([0], ["<answer>3</answer>"]).rewards == [1.0]
    finally:
        env.close()
    judge = ShellJudge(uid=LOADER_UID, writable_root=True, root_uids=WRITABLE_ROOT_BASES[2])
    assert judge.action_ok(entry, "wc -l < /usr/stock.log") is True
    assert judge.action_ok(entry, "echo 4") is False
    assert not os.path.exists("/usr/stock.log")
    assert sandbox_processes(WRITABLE_ROOT_UIDS) == []
