"""State checks (:meth:`ShellSession.run_checks`): AgentBench's check chain run on the agent's final
machine after its last turn. The agent is the adversary of its reward: on a writable root it is root of
its sandbox and may replace the interpreters, the loader's files and the alternatives' links, leave
processes running, and the check executes its programs. Each attack here works in the agent's own
view (shown first, where it can be shown) and scores 0 in the check, while the honest solution
scores 1; what the agent legitimately changed (users, ``/etc``, ``~/.bashrc``) is what the check sees.
Every session is a real sandbox with a real bash."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from shell_helpers import (
    LOADER_UID,
    STATE_CHECK_BASES,
    UID_BASE,
    WRITABLE_ROOT_UIDS,
    bash,
    item,
    make,
    sandbox_processes,
)

from mintrl.data.base import RowFilter
from mintrl.env.shell.loader import STATE_CHECK, STATE_CHECKS_OFF, load_os_tasks
from mintrl.env.shell.session import CheckResult, ShellLimits, ShellSession
from mintrl.judge.shell import ShellJudge
from mintrl.sandbox import launch

LIMITS = ShellLimits(wall_s=60.0, memory_mb=512, processes=64, writable_root=True)
DEFAULT_LIMITS = ShellLimits(wall_s=60.0, memory_mb=512, processes=64)
# a check in the style of AgentBench's calc rows (its own text): calc's output against Python's, for
# three expressions; the comparison reads calc's output as a number (no code of calc's evaluated)
CALC_CHECK = r"""
check() {
    expected=$(python3 -c "print('%.6f' % ($1))")
    out=$(calc "$1")
    python3 -c 'import sys; print(abs(float(sys.argv[1]) - float(sys.argv[2])) < 1e-5)' "$out" "$expected" 2>/dev/null
}
for e in "15 + (27 * 4) - 10" "20 / (5 + 2) - 1" "3 + (6.7 * 9) - 5.5"; do
    [ "$(check "$e")" = True ] || exit 1
done
exit 0
"""
HONEST_CALC = """cat > /usr/local/bin/calc <<'EOF'
#!/usr/bin/python3
import sys
print("%.6f" % eval(" ".join(sys.argv[1:])))
EOF
chmod +x /usr/local/bin/calc"""
WRONG_CALC = "printf '#!/bin/sh\\necho 0\\n' > /usr/local/bin/calc && chmod +x /usr/local/bin/calc"
# a container's capabilities (the writable root's programs'): CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4,
# KILL 5, SETGID 6, SETUID 7, SETPCAP 8, NET_BIND_SERVICE 10, SYS_CHROOT 18, AUDIT_WRITE 29, SETFCAP 31
CONTAINER_CAPS = sum(1 << b for b in (0, 1, 3, 4, 5, 6, 7, 8, 10, 18, 29, 31))
# a program that answers True to anything and exits 0, put in place of the interpreters
FORGER = "printf '#!/bin/sh\\necho True\\nexit 0\\n' > /tmp/forger && chmod +x /tmp/forger"


def session(k: int, init: str = "") -> ShellSession:
    """A writable-root session on the state-check uid range ``k`` (0..3)."""
    return ShellSession(UID_BASE, LIMITS, 4096, init=init, root_uids=STATE_CHECK_BASES[k])


def checked(shell: ShellSession, scripts, answer: str = "", timeout_s: float = 20.0) -> list[CheckResult]:
    """``run_checks`` of ``scripts``; afterwards no process of any writable root is left."""
    results = shell.run_checks(scripts, answer, timeout_s)
    assert not shell.alive
    assert sandbox_processes(WRITABLE_ROOT_UIDS) == []
    return results


def codes(results: list[CheckResult]) -> list[int | None]:
    return [r.exit_code for r in results]


def test_an_honest_calc_in_usr_local_bin_passes_and_a_wrong_one_fails():
    with session(0) as shell:
        assert shell.run(HONEST_CALC + " && calc '2 * (9 / 3)'", 10.0).output == "6.000000\n"
        assert codes(checked(shell, [("bash", CALC_CHECK)])) == [0]
    with session(0) as shell:
        assert shell.run(WRONG_CALC, 10.0).exit_code == 0
        assert codes(checked(shell, [("bash", CALC_CHECK)])) == [1]


def test_the_chain_passes_the_answer_and_each_stdout_and_stops_at_the_first_failure():
    python = "import sys; print(sys.argv[1:]); sys.exit(0 if sys.argv[1:] == ['a b', 'a b|--\\n'] else 3)"
    with session(1) as shell:
        results = checked(
            shell, [("bash", 'echo "$1|$0"'), ("python", python), ("bash", "exit 4"), ("bash", "echo no")], "a b"
        )
    assert results == [
        CheckResult(0, "a b|--\n"),  # bash -c script -- answer: $0 is "--", as AgentBench runs it
        CheckResult(0, "['a b', 'a b|--\\n']\n"),
        CheckResult(4, ""),
    ]


def test_interpreters_the_agent_replaced_are_not_the_checks():
    """The agent puts a forger (answers True, exits 0) in place of /usr/bin/python3, then, from a
    process left behind after its last command (its own shell's bash cannot be replaced while it
    serves commands), of /usr/bin/bash: in its own view python3 says True and bash -c 'exit 1' exits
    0; the check runs the host's interpreters and fails the wrong calc."""
    replace_bash = "cp /tmp/forger /usr/bin/.b && mv -f /usr/bin/.b /usr/bin/bash && /usr/bin/bash -c 'exit 1'"
    with session(2) as shell:
        assert shell.run(f"{WRONG_CALC} && {FORGER} && cp /tmp/forger /usr/bin/python3", 10.0).exit_code == 0
        assert shell.run("python3 -c 'print(1 == 2)'", 10.0).output == "True\n"
        assert shell.run(f"({CALC_CHECK})", 10.0).exit_code == 0  # the check run in the agent's own shell: forged
        shell.run(f"(sleep 0.2; {replace_bash}; echo $? > /tmp/seen) >/dev/null 2>&1 &", 10.0)
        time.sleep(1.0)
        results = checked(shell, [("bash", "cat /tmp/seen; head -c 2 /usr/bin/bash; echo\n" + CALC_CHECK)])
    assert results == [CheckResult(1, "0\n\x7fE\n")]  # the forger ran in the agent's view; the host's ELF bash here


def test_the_agents_ld_so_preload_is_not_the_loaders_in_the_check():
    """/etc/ld.so.preload naming the agent's library (a real one where a compiler exists: its
    constructor makes every python3 print True and exit 0; else a file that is no ELF object, which
    the loader names in an error on stderr): in the check the host's (absent: empty) file is bound."""
    compiler = shutil.which("gcc") is not None
    library = (
        r"""cat > /tmp/p.c <<'EOF'
#include <stdio.h>
#include <string.h>
#include <unistd.h>
extern char *program_invocation_short_name;
__attribute__((constructor)) static void forge(void) {
    if (strncmp(program_invocation_short_name, "python3", 7) == 0) { puts("True"); fflush(stdout); _exit(0); }
}
EOF
gcc -shared -fPIC -o /usr/local/lib/libforge.so /tmp/p.c"""
        if compiler
        else "echo 'not ELF' > /usr/local/lib/libforge.so"
    )
    with session(3) as shell:
        assert (
            shell.run(
                f"{WRONG_CALC} && {library} && echo /usr/local/lib/libforge.so > /etc/ld.so.preload", 60.0
            ).exit_code
            == 0
        )
        seen = shell.run("python3 -c 'print(1 == 2)' 2>&1", 10.0).output
        assert seen == "True\n" if compiler else "ld.so" in seen
        if compiler:
            assert shell.run(f"({CALC_CHECK})", 10.0).exit_code == 0  # the check run in the agent's own shell: forged
        results = checked(shell, [("bash", CALC_CHECK + "\n"), ("bash", "true")])
        assert codes(results) == [1]
    with session(3) as shell:  # the loader's files as the check sees them: the host's
        shell.run("echo /usr/local/lib/libforge.so > /etc/ld.so.preload", 10.0)
        results = checked(shell, [("bash", "wc -c < /etc/ld.so.preload; python3 -c 'print(1 == 2)' 2>&1")])
    assert results == [CheckResult(0, "0\nFalse\n")]


def test_a_process_the_agent_left_running_is_dead_during_the_check():
    """A setsid daemon that rewrites a file every 10 ms: in the agent's own shell a write to that file
    does not last; in the check it does (the daemon died with the sandbox)."""
    daemon = (
        "setsid nohup bash -c 'while :; do echo forged > /tmp/state; sleep 0.01; done' >/dev/null 2>&1 & echo started"
    )
    probe = "echo mine > /tmp/state; sleep 0.5; cat /tmp/state"
    with session(0) as shell:
        assert shell.run(daemon, 10.0).output == "started\n"
        assert shell.run(probe, 10.0).output == "forged\n"
        results = checked(shell, [("bash", probe + '; [ "$(cat /tmp/state)" = mine ]')])
    assert results == [CheckResult(0, "mine\n")]


CALC_ATTACKS = r"""cat > /usr/local/bin/calc <<'EOF'
#!/usr/bin/python3
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
parent = os.getppid()
found = []
try:
    os.close(os.open(f"/proc/{parent}/mem", os.O_RDWR))
    found.append("mem open")
except OSError as exc:
    found.append(f"mem {exc.errno}")
if len(sys.argv) > 2:  # in the agent's own shell: only the memory file (an attach would stop its bash)
    print("; ".join(found))
    sys.exit(0)
found.append(f"ptrace {libc.ptrace(16, parent, None, None)} {ctypes.get_errno()}")  # PTRACE_ATTACH
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
data = ctypes.create_string_buffer(8)
local, remote = Iovec(ctypes.addressof(data), 8), Iovec(0x400000, 8)
written = libc.process_vm_writev(parent, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
found.append(f"vm_writev {written} {ctypes.get_errno()}")
for sig in (signal.SIGKILL, signal.SIGSTOP):
    os.kill(1, sig)  # PID 1 of the check's namespace: the check's bash, which no signal from inside reaches
found.append("signalled")
print("; ".join(found))
EOF
chmod +x /usr/local/bin/calc"""


def test_calc_cannot_reach_the_checks_bash_through_proc_ptrace_or_signals():
    """The check executes the agent's calc; calc tries to write its parent's memory (/proc/<ppid>/mem:
    possible in the agent's own shell), to ptrace it, to write it with process_vm_writev, and to kill
    or stop the check's bash: no procfs, EPERM, EPERM, and the bash goes on (its exit code is its own)."""
    script = 'out=$(calc 1+1); echo "$out"; echo alive; [ "$out" = 2.000000 ]'
    with session(1) as shell:
        assert shell.run(CALC_ATTACKS, 10.0).exit_code == 0
        assert shell.run("calc 1 own", 10.0).output == "mem open\n"  # its own bash's memory, in its own view
        results = checked(shell, [("bash", script)])
    assert results == [CheckResult(1, "mem 2; ptrace -1 1; vm_writev -1 1; signalled\nalive\n")]


def test_what_the_agent_changed_is_what_the_check_sees_and_the_host_programs_stay():
    """A user the agent added, a file of /etc it edited, its ~/.bashrc, a file's group and mode (read
    by users through runuser): the check sees them; the root-level link /lib64 and the awk of
    /etc/alternatives, which the agent broke or redirected, are the host's in the check."""
    init = "echo test > /testfile && for u in jack george; do useradd -m -s /bin/bash $u; done"
    agent = (
        "useradd -m alice && echo 'Port 2222' >> /etc/app.conf && echo 'export GREETING=hello' >> ~/.bashrc"
        " && groupadd readers && usermod -a -G readers jack && chgrp readers /testfile && chmod 640 /testfile"
        f" && {FORGER} && ln -sf /tmp/forger /etc/alternatives/awk"
    )
    check = (
        "id -un alice && grep -x 'Port 2222' /etc/app.conf && grep -c GREETING ~/.bashrc"
        " && runuser -u jack -- cat /testfile && ! runuser -u george -- cat /testfile 2>/dev/null"
        " && ls -l /testfile | awk '{print $1, $4}' && readlink /lib64"
    )
    with session(2, init=init) as shell:
        assert shell.init_result.exit_code == 0, shell.init_result.output
        assert shell.run(agent, 10.0).exit_code == 0, "premise"
        assert shell.run("echo x | awk '{print 1}'", 10.0).output == "True\n"  # its awk is the forger
        shell.run("rm /lib64 && mkdir /lib64", 10.0)  # the loader's link broken: /lib64/ld-linux-*.so.2 gone
        results = checked(shell, [("bash", check)])
    assert results == [CheckResult(0, "alice\nPort 2222\n1\ntest\n-rw-r----- readers\nusr/lib64\n")]


def test_a_check_runs_as_the_namespaces_root_with_a_containers_capabilities_and_no_procfs():
    # the bounding set, no_new_privs and the seccomp mode (PR_CAPBSET_READ 23, PR_GET_NO_NEW_PRIVS 39,
    # PR_GET_SECCOMP 21), and the working folder
    probe = (
        "import ctypes, os; libc = ctypes.CDLL(None)\n"
        "print(sum(1 << c for c in range(64) if libc.prctl(23, c, 0, 0, 0) == 1), libc.prctl(39, 0, 0, 0, 0),"
        " libc.prctl(21, 0, 0, 0, 0), os.getcwd())"
    )
    script = f"id -u; ls -A /proc; echo \"$PATH\"; python3 -c '{probe}'"
    # what stays hidden from the check's processes as from the agent's: installed packages, what others
    # cannot read on the host under the folders the check sees as the host has them
    hidden = [p for p in launch.hidden_paths() if p.startswith("/usr/")]
    private = [p for p in launch.private_paths(("/usr",)) if os.path.isdir(p)]
    assert hidden and private, "premise: a package folder and a private folder under /usr"
    script += f"; for d in {hidden[0]} {private[0]}; do ls -A $d | wc -l; done"
    with session(3) as shell:
        sockets = shell.run("ls -l /proc/*/fd 2>/dev/null | grep -c socket", 10.0).output  # none: no check channel
        results = checked(shell, [("bash", script)])
    assert sockets == "0\n"
    path = "/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin"
    assert results == [CheckResult(0, f"0\nempty\n{path}\n{CONTAINER_CAPS} 1 2 /tmp/work\n0\n0\n")]


def test_a_check_past_its_time_limit_fails_and_leaves_no_process():
    with session(0) as shell:
        results = checked(shell, [("bash", "(sleep 60 &) ; sleep 60")], timeout_s=1.0)
    assert results == [CheckResult(None, "", timed_out=True)]


def test_a_default_session_checks_as_its_unprivileged_uid_on_its_final_files():
    with ShellSession(UID_BASE, DEFAULT_LIMITS, 4096) as shell:
        shell.run("echo 5 > ~/n", 10.0)
        results = shell.run_checks([("bash", "id -u; cat ~/n; ls -A /proc")], "", 10.0)
    assert results == [CheckResult(0, f"{UID_BASE}\n5\nempty\n")]
    assert sandbox_processes() == []


def test_a_dead_session_cannot_be_checked():
    with session(1) as shell:
        shell.run("exit", 10.0)
        with pytest.raises(RuntimeError, match="has ended"):
            shell.run_checks([("bash", "true")], "", 10.0)


# ------------------------------------------------------------- AgentBench rows with state checks, loaded


def load_rows(tmp_path, rows, root_uids: int | None = STATE_CHECK_BASES[1], state_checks: bool = True):
    """The entries of ``rows`` (a file in ``tmp_path``, scripts under it) and why the others were skipped."""
    (tmp_path / "check").mkdir(exist_ok=True)
    (tmp_path / "check" / "calc.sh").write_text(CALC_CHECK)
    path = tmp_path / "os.json"
    path.write_text(json.dumps(rows))
    skip = RowFilter(skip=True)
    entries = load_os_tasks(str(path), skip, uid=LOADER_UID, root_uids=root_uids, state_checks=state_checks)
    return entries, skip.skipped


CALC_ROW = {
    "description": "Make a calc command that prints the value of an expression with 6 decimals.",
    "create": {"local": "default"},
    "evaluation": {"check": {"file": "check/calc.sh"}, "example": HONEST_CALC},
}
MOVE_ROW = {
    "description": "Move my.config to the current folder and tell me where it was.",
    "create": {"init": "mkdir -p /home/u1/x && echo cfg > /home/u1/x/my.config"},
    "start": "mkdir /home/u2 && cd /home/u2",
    "evaluation": {
        "check": [
            {"language": "python", "code": "from sys import argv\nassert argv[1].strip() == '/home/u1/x/my.config'"},
            "test ! -e /home/u1/x/my.config",
            "test -e /home/u2/my.config",
        ],
        "example": "mv /home/u1/x/my.config /home/u2/ && echo /home/u1/x/my.config",
    },
}


def test_state_check_rows_load_on_a_writable_root_when_the_example_passes_and_the_initial_state_fails(tmp_path):
    suid = "ls -l /usr/bin/find | awk '{if ($1 ~ /^-..s/) exit 1; else exit 0}'"
    rows = [
        CALC_ROW,
        MOVE_ROW,
        {  # the init changes a host program: the check sees the host's, so it passes unsolved
            "description": "Fix the SUID hole.",
            "create": {"init": "chmod u+s /usr/bin/find"},
            "evaluation": {"check": {"code": suid}, "example": "chmod u-s /usr/bin/find"},
        },
        {"description": "Add nobody2.", "evaluation": {"check": "id -un nobody2", "example": "true"}},
        {"description": "Add u.", "evaluation": {"check": ["id -un u", None], "example": "useradd u"}},
    ]
    entries, skipped = load_rows(tmp_path, rows)
    assert [(e["check"], e["label"]) for e in entries] == [("state", ""), ("state", "/home/u1/x/my.config")]
    assert entries[0]["state_check"] == [["bash", CALC_CHECK]]
    assert entries[1]["state_check"][0] == ["python", MOVE_ROW["evaluation"]["check"][0]["code"]]
    assert [m.split(": ", 1)[1] for m in skipped] == [
        "field 'evaluation.check': the initial state passes it with an empty answer (nothing to do)",
        "field 'evaluation.check[0]': the example's final state fails it here (exit code 1)",
        # null runs the example again on the final state: useradd u exits 9 (the name is taken)
        "field 'evaluation.check[1]': the example's final state fails it here (exit code 9)",
    ]
    _, refused = load_rows(tmp_path, [CALC_ROW], root_uids=None)
    assert [m.split(": ", 1)[1] for m in refused] == [
        f"field 'evaluation.check[0]': 'check/calc.sh' is not a comparison script: {STATE_CHECK}"
    ]
    _, off = load_rows(tmp_path, [CALC_ROW], state_checks=False)  # a writable root, state checks not asked for
    assert [m.split(": ", 1)[1] for m in off] == [
        f"field 'evaluation.check[0]': 'check/calc.sh' is not a comparison script: {STATE_CHECKS_OFF}"
    ]
    assert ShellJudge(uid=LOADER_UID).answer_ok(entries[0], "anything") is True  # the state decides, not the answer


def test_the_environment_scores_a_state_check_on_the_episodes_final_state(tmp_path):
    entries, skipped = load_rows(tmp_path, [CALC_ROW, MOVE_ROW])
    assert skipped == []
    calc, move = entries
    env = make(writable_root=True, root_uid_base=STATE_CHECK_BASES[0])

    def rewards(entry, actions):
        env.reset([item(entry)])
        got = [env.step([0], [action]).rewards[0] for action in actions]
        assert env.live_shells() == 0 and sandbox_processes(WRITABLE_ROOT_UIDS) == []
        return got

    try:
        assert rewards(calc, [bash(HONEST_CALC), "<answer>done</answer>"]) == [0.0, 1.0]
        assert rewards(calc, ["<answer>done</answer>"]) == [0.0]  # nothing written: the check fails
        forged = f"{WRONG_CALC} && {FORGER} && cp /tmp/forger /usr/bin/python3"
        assert rewards(calc, [bash(forged), "<answer>done</answer>"]) == [0.0, 0.0]
        move_it = bash(MOVE_ROW["evaluation"]["example"])
        assert rewards(move, [move_it, "<answer>/home/u1/x/my.config</answer>"]) == [0.0, 1.0]
        assert rewards(move, [move_it, "<answer>/home/u2</answer>"]) == [0.0, 0.0]
        # a command past its time limit kills the shell: the check runs on the state rebuilt by replay
        assert rewards(move, [move_it, bash("sleep 5"), "<answer>/home/u1/x/my.config</answer>"]) == [0.0, 0.0, 1.0]
    finally:
        env.close()


def test_code_the_host_programs_reach_through_links_or_configuration_is_the_hosts():
    """Every python3 imports sitecustomize, which Debian links to /etc/python3.x/sitecustomize.py: the
    agent rewrites it, and in its own view python3 and the check say True (before the link targets
    were in the check's view, the check did too: exit 0, stdout 'True'); the check sees the host's.
    PAM's configuration and /etc/environment (where pam_env would take an LD_PRELOAD for runuser's
    command) are the host's too."""
    site = "/usr/lib/python3.11/sitecustomize.py"
    if not os.path.islink(site):
        pytest.skip("premise: the host's sitecustomize is a link into /etc")
    target = os.path.realpath(site)
    forged = f"printf 'import os\\nprint(\"True\", flush=True)\\nos._exit(0)\\n' > {target}"
    with session(3) as shell:
        assert shell.run(f"{WRONG_CALC} && {forged}", 10.0).exit_code == 0
        assert shell.run("python3 -c 'print(1 == 2)'", 10.0).output == "True\n"  # in the agent's own view
        assert shell.run(f"({CALC_CHECK})", 10.0).exit_code == 0
        shell.run(
            "echo LD_PRELOAD=/tmp/x.so >> /etc/environment; echo 'auth sufficient pam_permit.so' > /etc/pam.d/runuser",
            10.0,
        )
        sizes = "wc -c < /etc/environment; wc -c < /etc/pam.d/runuser; "
        results = checked(shell, [("bash", sizes + "python3 -c 'print(1 == 2)'; " + CALC_CHECK)])
    host = [os.path.getsize(p) if os.path.exists(p) else 0 for p in ("/etc/environment", "/etc/pam.d/runuser")]
    assert results == [CheckResult(1, f"{host[0]}\n{host[1]}\nFalse\n")]
