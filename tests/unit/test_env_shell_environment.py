"""env=shell: one persistent sandboxed bash per episode: exact observations on hand tasks (state across
commands, errors, exit codes), rewards, the per-command time limit and the restart by replay, the
output cap, the episode's shell time, slots, replay determinism, failures, and nothing left behind."""

from __future__ import annotations

import math
import os
import time

import pytest
from shell_helpers import FILES, SLOTS, bash, item, make, out, sandbox_processes, task

from mintrl.env.base import replay
from mintrl.env.shell.environment import ENDED_NOTE, cut_note, timeout_note
from mintrl.env.shell.protocol import NO_ACTION


@pytest.fixture()
def runs(tmp_path):
    """A folder for the shells' run folders: it must be empty, and no sandbox process alive, after each test."""
    folder = tmp_path / "runs"
    folder.mkdir()
    yield str(folder)
    assert sandbox_processes() == [], "a sandboxed process outlived its shell"
    assert os.listdir(folder) == [], "a shell left its run folder behind"


def episode(env, actions, entry=FILES):
    assert env.reset([item(entry)]) == [""]
    results = []
    for action in actions:
        results.append(env.step([0], [action]))
        if results[-1].done[0]:
            break
    return results


def test_commands_share_one_shell_and_the_answer_is_scored(runs):
    env = make(runs)
    steps = episode(
        env,
        [
            bash("ls ~/data"),
            bash("cd ~/data/sub && X=7 && cat c.txt"),
            bash("echo $X; pwd; cat missing"),
            "I think it is <answer> 2 </answer>",
        ],
    )
    assert [s.observations[0] for s in steps] == [
        out("a.txt\nb.log\nsub"),
        out("deep"),
        out("7\n/tmp/work/data/sub\ncat: missing: No such file or directory", exit_code=1),
        "",
    ]
    assert [s.action_kinds[0] for s in steps] == ["run", "run", "run_error", "answer"]
    assert [s.rewards[0] for s in steps] == [0.0, 0.0, 0.0, 1.0]
    assert [s.done[0] for s in steps] == [False, False, False, True]
    assert env.live_shells() == 0  # closed as soon as the episode ended
    assert env.metrics() == {
        "env/commands": 3.0,
        "env/command_errors": 1.0,
        "env/timeouts": 0.0,
        "env/restarts": 0.0,
        "env/invalid_actions": 0.0,
        "env/errors": 0.0,
        "env/seconds": pytest.approx(sum(s.seconds for s in steps), rel=0.05),
    }


@pytest.mark.parametrize(
    "answer,reward", [("<answer>3</answer>", 0.0), ("<answer>two</answer>", 0.0), ("<answer>02</answer>", 1.0)]
)
def test_answers_without_any_command_need_no_shell(runs, answer, reward):
    env = make(runs)
    [step] = episode(env, [answer])
    assert (step.rewards, step.done, step.action_kinds) == ([reward], [True], ["answer"])
    assert env.metrics()["env/commands"] == 0.0


def test_invalid_actions_and_max_turns(runs):
    env = make(runs, max_turns=2)
    steps = episode(env, ["the answer is 2", bash("echo hi")])
    assert [s.observations[0] for s in steps] == [NO_ACTION, ""]
    assert [(s.action_kinds[0], s.invalid[0], s.done[0], s.rewards[0]) for s in steps] == [
        ("invalid", True, False, 0.0),
        ("run", False, True, 0.0),
    ]


def test_a_command_past_the_time_limit_kills_the_shell_and_the_next_one_replays(runs):
    env = make(runs)
    start = time.monotonic()
    steps = episode(env, [bash("cd ~/data && X=5"), bash("echo before; sleep 30"), bash("echo $X; pwd")])
    assert time.monotonic() - start < 6.0
    assert [s.observations[0] for s in steps] == [
        out("(no output)"),
        out("before", timeout_note(1.0)),
        out("5\n/tmp/work/data"),  # the state rebuilt: init, then `cd ~/data && X=5`
    ]
    assert [s.action_kinds[0] for s in steps] == ["run", "run_error", "run"]
    metrics = env.metrics()
    assert (metrics["env/timeouts"], metrics["env/restarts"], metrics["env/command_errors"]) == (1.0, 1.0, 1.0)
    env.close()


def test_a_shell_that_exits_is_rebuilt(runs):
    env = make(runs)
    steps = episode(env, [bash("touch ~/mark"), bash("exit 3"), bash("ls ~")])
    assert [s.observations[0] for s in steps] == [out("(no output)"), out("(no output)", ENDED_NOTE), out("data\nmark")]
    env.close()


def test_output_is_capped_and_the_rest_read_and_dropped(runs):
    env = make(runs, max_output_chars=20)
    start = time.monotonic()
    steps = episode(env, [bash("seq 1 1000"), bash("head -c 50000000 /dev/zero | tr '\\0' y; echo"), bash("echo ok")])
    assert time.monotonic() - start < 3.0  # 50 MB drained well within the 1 s limit
    assert [s.observations[0] for s in steps] == [
        out("1\n2\n3\n4\n5\n6\n7\n8\n9\n10", cut_note(20)),
        out("y" * 20, cut_note(20)),
        out("ok"),
    ]
    env.close()


def test_an_endless_printer_hits_the_time_limit(runs):
    env = make(runs, max_output_chars=10)
    [step] = episode(env, [bash("yes")])
    assert step.observations[0] == out("y\ny\ny\ny\ny\n", cut_note(10) + "\n" + timeout_note(1.0))
    env.close()


def test_the_episode_ends_when_its_shell_time_is_spent(runs):
    env = make(runs, episode_timeout_s=1.5)
    steps = episode(env, [bash("sleep 30"), bash("sleep 30"), bash("echo never")])
    assert [(s.observations[0], s.done[0], s.rewards[0]) for s in steps] == [
        (out("(no output)", timeout_note(1.0)), False, 0.0),
        ("", True, 0.0),
    ]


def test_replay_gives_the_same_observations_twice(runs):
    env = make(runs)
    actions = [bash("ls -l ~/data | tail -n 2 | cut -c 1-10,30-"), bash("wc -l ~/data/a.txt"), "<answer>1</answer>"]
    first, last = replay(env, item(FILES), actions)
    second, _ = replay(env, item(FILES), actions)
    assert first == second and len(first) == 4 and last.done == [True] and last.rewards == [0.0]
    assert first[2] == out("2 /tmp/work/data/a.txt")


def test_episodes_are_isolated_and_slots_are_capped(runs):
    other = task("q", "mkdir -p ~/data && echo other > ~/data/a.txt", "other")
    env = make(runs)
    env.reset([item(FILES), item(other, 1)])
    step = env.step([0, 1], [bash("cat ~/data/a.txt; touch /tmp/shared"), bash("cat ~/data/a.txt; ls /tmp")])
    assert step.observations == [out("one\ntwo"), out("other\nwork")]  # a private /tmp each
    assert env.live_shells() == 2
    env.reset([item(FILES)] * (SLOTS + 1))
    assert env.live_shells() == 0  # reset closed them
    step = env.step(list(range(SLOTS + 1)), [bash("echo up")] * (SLOTS + 1))
    assert step.observations[:SLOTS] == [out("up")] * SLOTS
    assert (step.error[SLOTS], math.isnan(step.rewards[SLOTS]), step.done[SLOTS]) == (True, True, True)
    env.step([0], ["<answer>2</answer>"])  # frees a slot
    env.reset([item(FILES)])
    assert env.step([0], [bash("echo again")]).observations == [out("again")]
    env.close()
    assert env.live_shells() == 0


def test_bad_tasks_fail_their_episode_only(runs):
    env = make(runs)
    bad_init = task("q", "echo broken >&2; exit 4", "x")
    env.reset([item(bad_init), item({"question": "q"}, 1), item(FILES, 2)])
    step = env.step([0, 1, 2], [bash("ls"), "<answer>x</answer>", bash("echo fine")])
    assert step.error == [True, True, False] and step.observations[2] == out("fine")
    assert math.isnan(step.rewards[0]) and math.isnan(step.rewards[1])
    assert env.metrics()["env/errors"] == 2.0
    with pytest.raises(ValueError, match="episode 0 has finished"):
        env.step([0], [bash("ls")])
    assert env.score_final([2]) == [0.0]
    assert env.live_shells() == 0


def test_bad_fields_are_named():
    with pytest.raises(ValueError, match="env.command_timeout_s"):
        make(command_timeout_s=0)
    with pytest.raises(ValueError, match="env.max_shells"):
        make(max_shells=0)
    with pytest.raises(ValueError, match="env.memory_mb"):
        make(memory_mb=0)
