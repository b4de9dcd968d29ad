"""The hostile-command suite against env=shell (mirrors the code sandbox's in
tests/integration/test_sandbox.py): fork bomb, memory bomb, writes outside, network, killing the
parent, huge output, a daemon that outlives the episode. Each command bounds itself, so even a
sandbox failure cannot exhaust this machine. 0 escapes: every episode ends or goes on as documented,
the environment serves the next episode, no process of a sandbox uid is left after close, no file
is written outside the sandbox."""

from __future__ import annotations

import os
import socket
import threading
import time

from shell_helpers import FILES, bash, item, make, out, sandbox_processes

from mintrl.env.shell.environment import timeout_note

FORK_BOMB = "for i in $(seq 200); do (sleep 30 &) 2>/dev/null; done; echo forked"
MEMORY_BOMB = "python3 -c 'x = bytearray(3 << 30)' 2>&1 | tail -n 1"
WRITES = (
    "touch {canary}.new; rm -f {canary}; echo x > {outside}/new; echo x > /etc/mintrl-hostile-marker; "
    "echo x > /usr/mintrl-hostile-marker; touch /root/inside /home/inside /tmp/inside; ls /root /home /tmp"
)
NETWORK = "exec 3<>/dev/tcp/127.0.0.1/{port} && echo leaked >&3; echo done"
KILL_PARENT = "kill -9 $PPID 1 {pid}; kill -9 -1; echo alive"
FLOOD = "head -c 300000000 /dev/zero"  # 300 MB of output, drained and dropped
DAEMON = "setsid nohup sleep 60 >/dev/null 2>&1 & (nohup sleep 60 >/dev/null 2>&1 &); echo started"


def test_hostile_commands_are_contained(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)  # world-writable: only the sandbox's own mounts and user keep it safe
    canary = outside / "canary"
    canary.write_text("keep me")
    canary.chmod(0o666)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted = []

    def accept():
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not accepted:
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    suite = {
        "fork bomb": FORK_BOMB,
        "memory bomb": MEMORY_BOMB,
        "writes outside": WRITES.format(canary=canary, outside=outside),
        "network": NETWORK.format(port=server.getsockname()[1]),
        "killing the parent": KILL_PARENT.format(pid=os.getpid()),
        "huge output": FLOOD,
        "daemon": DAEMON,
    }
    env = make(str(runs), max_output_chars=1000, command_timeout_s=2.0)
    start = time.monotonic()
    env.reset([item(FILES, i) for i in range(len(suite))])
    got, left_after = {}, {}
    for e, (name, command) in enumerate(suite.items()):
        first = env.step([e], [bash(command)])
        after = env.step([e], [bash("echo still here")])  # the episode goes on, in a live or rebuilt shell
        end = env.step([e], ["<answer>2</answer>"])  # the episode ends: its shell is closed at once
        got[name] = (first, after, end)
        left_after[name] = sandbox_processes()  # nothing of it survives, a daemon included
    elapsed = time.monotonic() - start
    live = env.live_shells()
    env.close()
    leftovers = sandbox_processes()
    listener.join(timeout=0)
    server.close()
    os.kill(os.getpid(), 0)  # this process is alive
    assert live == 0 and leftovers == [] and os.listdir(runs) == []
    assert left_after == {name: [] for name in suite}
    for name, (first, after, end) in got.items():
        assert first.error == [False] and first.done == [False], name
        assert after.observations == [out("still here")] and after.error == [False], name
        assert end.rewards == [1.0], name  # the environment still scores
    obs = {name: first.observations[0] for name, (first, _, _) in got.items()}
    # the process limit stops the loop: bash's fork retries run into the time limit (or it gives up first)
    assert "forked" in obs["fork bomb"] or timeout_note(2.0) in obs["fork bomb"]
    assert obs["memory bomb"] == out("MemoryError")  # 3 GiB refused under the 256 MiB address-space limit
    assert canary.read_text() == "keep me" and sorted(os.listdir(outside)) == ["canary"]
    for path in (
        "/etc/mintrl-hostile-marker",
        "/usr/mintrl-hostile-marker",
        "/root/inside",
        "/home/inside",
        "/tmp/inside",
    ):
        assert not os.path.exists(path), path
    assert "Read-only file system" in obs["writes outside"] and obs["writes outside"].count("\ninside\n") == 3
    assert not accepted and obs["network"].startswith("Output:\n") and "done" in obs["network"]
    assert "alive" in obs["killing the parent"]
    assert obs["huge output"].startswith("Output:\n" + "\x00" * 1000 + "\n... (output cut at 1000 characters)")
    assert obs["daemon"] == out("started")
    assert elapsed < 30
