"""Shells of different episodes share the machine fairly: busy loops one episode leaves behind (in
sessions of their own) do not slow another episode's commands, because each shell's sandbox has its
own cpu cgroup (one core; sibling cgroups weigh alike however many processes they hold)."""

from __future__ import annotations

import time

from shell_helpers import UID_BASE, sandbox_processes

from mintrl.env.shell.session import ShellLimits, ShellSession

BUSY = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo $i"  # about a second of one core
HOG = "for k in $(seq 16); do setsid bash -c 'while :; do :; done' </dev/null >/dev/null 2>&1 & done; echo started"


def test_busy_loops_left_by_one_shell_do_not_slow_another():
    limits = ShellLimits(wall_s=90.0, cpu_s=60, memory_mb=256, processes=32)
    with ShellSession(UID_BASE, limits, 4096) as quiet:
        alone = quiet.run(BUSY, 30.0)
        with ShellSession(UID_BASE + 1, limits, 4096) as hog:
            assert hog.run(HOG, 5.0).output.strip() == "started"
            time.sleep(0.5)  # the loops are running
            beside = quiet.run(BUSY, 30.0)
    assert (alone.output.strip(), beside.output.strip()) == ("200000", "200000")
    assert beside.seconds < 2.0 * alone.seconds + 1.0, (beside.seconds, alone.seconds)
    assert hog.isolation["cpu_cgroup"] is True
    assert sandbox_processes() == []
