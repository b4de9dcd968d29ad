"""`mintrl-reproduce-confirm`: the claims at seeds fixed in advance in the confirmation sweep files, on hand-made
job folders (one job per folder, as `make confirm-core` writes them): the plan read from the sweep file as Hydra
composes it, pending verdicts with k of N jobs, jobs outside the plan left out, no verdict across two commits, the
verdict and the paired difference of a complete plan by hand, the block kept byte for byte by every writer, the
CLI and the make target."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from multirun_helpers import repro_config, write_job, write_reproduce_multirun
from omegaconf import OmegaConf

from mintrl.analysis.agent_report import write_agents_report
from mintrl.analysis.confirm import (
    AGENTS_SWEEP,
    CORE_SWEEP,
    build_confirmation,
    read_plan,
    sweep_file,
    sweep_params,
    sweep_values,
)
from mintrl.analysis.confirm_report import fmt_seeds, plan_line, render_confirm_section, write_confirmation
from mintrl.analysis.report import write_report
from mintrl.analysis.report_blocks import AGENTS, CONFIRM, block_span, markers
from mintrl.build.config import CONFIG_DIR
from mintrl.cli.reproduce_confirm import main as confirm_main

REPO = Path(__file__).resolve().parents[2]
T2 = 4.302652729911275  # t(0.975, 2): 3 seeds
A, B = "a" * 40, "b" * 40  # two commits
SEEDS = (100, 101, 102)
# final held-out pass@1 per seed 100, 101, 102: Const - GRPO 0.20, 0.20, 0.18 (mean 0.58 / 3 = 0.19333, sd
# sqrt(((0.2 - m)^2 * 2 + (0.18 - m)^2) / 2) = 0.011547; half-width 4.3027 * 0.011547 / sqrt 3 = 0.028684:
# [0.164649, 0.222017], holds)
FINALS = {"mintrl_const": (0.40, 0.45, 0.42), "grpo": (0.20, 0.25, 0.24)}


def small_plan(folder: Path, name: str = CORE_SWEEP, params: str = "method: mintrl_const,grpo") -> Path:
    """A sweep file ``<folder>/<name>.yaml`` fixing ``params`` and seeds 100-102; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    lines = "\n".join(f"      {p}" for p in params.split("\n"))
    path.write_text(f"hydra:\n  sweeper:\n    params:\n{lines}\n      seed: 100,101,102\n")
    return path


def core_job(root: Path, method: str, seed: int, final: float | None, commit: str = A, **kw) -> Path:
    """One confirmation job in its own folder ``<root>/<method>_s<seed>_<commit>/0/`` (``make confirm-core``'s
    layout): held-out pass@1 ending at ``final`` (None: not logged), its manifest's commit, summary.json unless
    ``finished=False``; ``extra`` overrides and another ``sweep`` when given. Returns the folder."""
    folder = root / f"{method}_s{seed}_{commit[:7]}{kw.get('suffix', '')}"
    scalars = {"val/pass@1": [(0, 0.05), (6, final)]} if final is not None else {"train/loss": [(0, 1.0)]}
    config = repro_config(4, 0, method=method) if method == "grpo" else repro_config(2, 2, method=method)
    overrides = [f"method={method}", f"seed={seed}", f"+sweep={kw.get('sweep', CORE_SWEEP)}", *kw.get("extra", ())]
    write_job(folder / "0", overrides, scalars, config)
    (folder / "0" / "manifest.json").write_text(json.dumps({"commit": commit}))
    if kw.get("finished", True):
        (folder / "0" / "summary.json").write_text("{}")
    (folder / "multirun.yaml").write_text("hydra: {}\n")
    return folder


def complete_core(root: Path, commits=(A, A, A)) -> list[Path]:
    """Every job of the small core plan (FINALS), seed i at ``commits[i]``; seed 100 of each row without an exported
    policy (callbacks.hf_export=null: what a job keeps, not what it measures)."""
    return [
        core_job(root, method, seed, FINALS[method][i], commits[i], extra=["callbacks.hf_export=null"] * (i == 0))
        for method in FINALS
        for i, seed in enumerate(SEEDS)
    ]


def core_only(confirmations):
    return next(c for c in confirmations if c.sweep == CORE_SWEEP)


# --- the plan -----------------------------------------------------------------------------------------


def test_the_committed_plans_are_what_hydra_composes(monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DIR", "/checkout")
    for sweep in (CORE_SWEEP, AGENTS_SWEEP):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose("train", overrides=[f"+sweep={sweep}"], return_hydra_config=True)
        composed = {k: str(v) for k, v in OmegaConf.to_container(cfg.hydra.sweeper.params).items()}
        assert sweep_params(sweep_file(sweep)) == composed, sweep
    core = read_plan(sweep_file(CORE_SWEEP))
    assert core.rows == ("method=mintrl_const", "method=grpo") and core.fixed == ()
    assert core.seeds == tuple(str(s) for s in range(100, 112)) and len(core.pairs) == 24
    agents = read_plan(sweep_file(AGENTS_SWEEP))
    rows = ("grpo8", "entropy8", "rail8", "random8")
    assert agents.rows == tuple(f"experiment=agent/{r}_cpu" for r in rows)
    assert agents.seeds == tuple(str(s) for s in range(100, 106))
    assert set(agents.fixed) == {"preset=cpu_sql", "data=agentbench_db"} and len(agents.pairs) == 24


def test_sweep_params_follow_the_defaults_and_sweep_values_as_hydra(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "defaults:\n  - override /data: x\nhydra:\n  sweeper:\n    params:\n      seed: 0\n      a: 1,2\n      b: z\n"
    )
    (tmp_path / "child.yaml").write_text(
        "defaults:\n  - base\n  - _self_\nhydra:\n  sweeper:\n    params:\n      seed: range(5,8)\n      b: y\n"
    )
    assert sweep_params(tmp_path / "child.yaml") == {"seed": "range(5,8)", "a": "1,2", "b": "y"}
    plan = read_plan(tmp_path / "child.yaml")
    assert (plan.name, plan.seeds, plan.rows, plan.fixed) == ("child", ("5", "6", "7"), ("a=1", "a=2"), ("b=y",))
    assert sweep_values("seed", "3") == ["3"]
    (tmp_path / "seedless.yaml").write_text("hydra:\n  sweeper:\n    params:\n      a: 1,2\n")
    with pytest.raises(ValueError, match="no seed"):
        read_plan(tmp_path / "seedless.yaml")
    with pytest.raises(FileNotFoundError, match="nope"):
        read_plan(tmp_path / "nope.yaml")
    assert fmt_seeds(["102", "100", "101", "105", "107", "108"]) == "100-102, 105, 107, 108" and fmt_seeds([]) == "none"


# --- pending, outside the plan, commits, the verdict ---------------------------------------------------


def test_pending_k_of_n_gives_interim_numbers_and_no_verdict(tmp_path):
    plan = small_plan(tmp_path / "sweep")
    runs = tmp_path / "runs"
    folders = [
        core_job(runs, "mintrl_const", 100, 0.40),
        core_job(runs, "mintrl_const", 101, 0.45),
        core_job(runs, "grpo", 100, 0.20),
        core_job(runs, "grpo", 101, None, finished=False),  # still running: not counted
    ]
    c = core_only(build_confirmation(folders, core_sweep=plan, agents_sweep=sweep_file(AGENTS_SWEEP)))
    assert c.blocked == "pending: 3 of 6 jobs finished"
    assert c.status.missing == [("method=mintrl_const", "102"), ("method=grpo", "101"), ("method=grpo", "102")]
    assert [j.path for j in c.status.running] == [folders[3] / "0"]
    diff = c.details["diff"]
    assert diff["seeds"] == ["100"] and diff["mean"] == pytest.approx(0.20)  # interim: the one paired seed
    text = render_confirm_section([c])
    assert "- **verdict**: **pending: 3 of 6 jobs finished**" in text
    assert "#### Claims (interim: not a verdict)" in text and "interim, not a verdict: final held-out" in text
    assert "**holds**" not in text and "**undecided**" not in text and "add seed" not in text
    assert "| `method=grpo` | 100-102 (3) | 100 (1) | 101, 102 |" in text
    assert f"`{folders[3] / '0'}`" in text and "unfinished" in text


def test_jobs_outside_the_plan_are_listed_and_left_out(tmp_path):
    plan = small_plan(tmp_path / "sweep")
    runs = tmp_path / "runs"
    folders = complete_core(runs)
    folders += [
        core_job(runs, "mintrl_const", 7, 0.90),  # a seed the plan does not name
        core_job(runs, "grpo", 7, 0.10),
        core_job(runs, "grpo", 101, 0.90, extra=["trainer.max_steps=1"], suffix="_short"),  # a setting it does not
        core_job(runs, "grpo", 102, 0.90, sweep="reproduce_core", suffix="_other"),  # another sweep
    ]
    c = core_only(build_confirmation(folders, core_sweep=plan))
    why = {str(job.path.parent.name): reason for job, reason in c.status.outside}
    assert why == {
        f"mintrl_const_s7_{A[:7]}": "seed 7 is not in the plan",
        f"grpo_s7_{A[:7]}": "seed 7 is not in the plan",
        f"grpo_s101_{A[:7]}_short": "overrides beyond the plan: trainer.max_steps=1",
        f"grpo_s102_{A[:7]}_other": "ran +sweep=reproduce_core, not +sweep=confirm_core",
    }
    assert c.blocked is None and c.details["diff"]["seeds"] == ["100", "101", "102"]  # never seed 7
    assert c.details["diff"]["mean"] == pytest.approx(0.58 / 3)
    text = render_confirm_section([c])
    assert "- **not in the plan** (left out): " in text and "seed 7 is not in the plan" in text


def test_two_commits_give_no_verdict(tmp_path):
    plan = small_plan(tmp_path / "sweep")
    c = core_only(build_confirmation(complete_core(tmp_path / "runs", (A, A, B)), core_sweep=plan))
    assert not c.status.missing and list(c.commits) == [A, B]
    assert (len(c.commits[A]), len(c.commits[B])) == (4, 2)
    assert c.blocked == "no verdict: the jobs ran at 2 commits (aaaaaaa, bbbbbbb); the claim needs one"
    text = render_confirm_section([c])
    assert "**more than one commit: no verdict**" in text and "- **verdict**: **no verdict: the jobs ran at 2" in text
    assert "(i) **holds**" not in text


def test_a_complete_plan_at_one_commit_gets_the_verdict_by_hand(tmp_path):
    plan = small_plan(tmp_path / "sweep")
    c = core_only(build_confirmation(complete_core(tmp_path / "runs"), core_sweep=plan))
    assert c.blocked is None and list(c.commits) == [A]
    diff = c.details["diff"]
    m = 0.58 / 3
    sd = math.sqrt(((0.20 - m) ** 2 * 2 + (0.18 - m) ** 2) / 2)
    assert diff["diffs"] == pytest.approx([0.20, 0.20, 0.18]) and diff["mean"] == pytest.approx(m)
    assert diff["sd"] == pytest.approx(0.011547, abs=1e-6)
    assert diff["low"] == pytest.approx(m - T2 * sd / math.sqrt(3)) and diff["low"] == pytest.approx(0.164649, abs=1e-6)
    assert diff["high"] == pytest.approx(0.222017, abs=1e-6)
    assert c.claims[0].verdict == "holds"
    text = render_confirm_section([c])
    assert "- **verdict**: (i) **holds**" in text and "+0.193 [+0.165, +0.222] (n=3)" in text
    assert "| 100 | 0.400 | 0.200 | +0.200 |" in text and "interim:" not in text and "interim," not in text
    assert "- **commit**: `" + A + "` (6 jobs) (each job's manifest.json)" in text


def test_a_finished_job_without_its_measure_gives_no_verdict(tmp_path):
    plan = small_plan(tmp_path / "sweep")
    runs = tmp_path / "runs"
    folders = [
        core_job(runs, m, s, FINALS[m][i] if (m, s) != ("grpo", 102) else None)
        for m in FINALS
        for i, s in enumerate(SEEDS)
    ]
    c = core_only(build_confirmation(folders, core_sweep=plan))
    assert c.blocked == "no verdict: 1 job(s) logged no held-out pass@1: method=grpo seed=102"


def test_the_agents_claims_at_the_planned_seeds(tmp_path):
    """A complete agents plan (uniform GRPO-8 and RAIL at seeds 100-102 on agentbench_db): R1 paired by seed by
    hand (RAIL - GRPO 0.20, 0.25, 0.15: mean 0.20, sd 0.05, [0.076, 0.324], holds); R2 lacks its row."""
    plan = small_plan(
        tmp_path / "sweep", AGENTS_SWEEP, "experiment: agent/grpo8_cpu,agent/rail8_cpu\ndata: agentbench_db"
    )
    success = {"agent/grpo8_cpu": (0.10, 0.15, 0.20), "agent/rail8_cpu": (0.30, 0.40, 0.35)}
    folders = []
    for experiment, values in success.items():
        for seed, value in zip(SEEDS, values):
            folder = tmp_path / "runs" / f"{experiment.split('/')[1]}_s{seed}"
            overrides = [f"seed={seed}", f"experiment={experiment}", "data=agentbench_db", f"+sweep={AGENTS_SWEEP}"]
            scalars = {"val/pass@1": [(0, 0.05), (6, value)], "allocation/generated_per_prompt": [(0, 8.0)]}
            write_job(folder / "0", overrides, scalars)
            (folder / "0" / "manifest.json").write_text(json.dumps({"commit": A}))
            (folder / "0" / "summary.json").write_text("{}")
            folders.append(folder)
    c = build_confirmation(agents_dirs=folders, core_sweep=small_plan(tmp_path / "core"), agents_sweep=plan)[1]
    assert c.sweep == AGENTS_SWEEP and c.blocked is None and c.details["level"] == "agentbench_db"
    r1, r2 = c.claims[:2]
    assert (r1.key, r1.verdict, r2.verdict) == ("R1", "holds", "not measured")
    assert "+0.200 [+0.076, +0.324] (n=3)" in r1.measure
    text = render_confirm_section(build_confirmation(agents_dirs=folders[:4], agents_sweep=plan))
    assert "- **verdict**: **pending: 4 of 6 jobs finished**" in text
    assert "| RAIL (`agent/rail8_cpu`) | 100 (1) |" in text


# --- the block, kept by every writer --------------------------------------------------------------------

CONFIRM_BLOCK = "\n".join([*markers(CONFIRM)[:1], "## confirm\r\nkept as is ", markers(CONFIRM)[1]])
AGENTS_BLOCK = "\n".join([markers(AGENTS)[0], "## agents", markers(AGENTS)[1]])


def test_the_core_writer_keeps_the_confirm_block_byte_for_byte_in_its_place(tmp_path):
    methods = write_reproduce_multirun(tmp_path / "methods")
    out = tmp_path / "reproduction.md"
    for blocks in ((AGENTS_BLOCK, CONFIRM_BLOCK), (CONFIRM_BLOCK, AGENTS_BLOCK), (CONFIRM_BLOCK,)):
        kept = "\n\n".join(blocks) + "\n"
        out.write_bytes(f"# an older core report\n\n{kept}".encode())
        write_report(methods, out, repo_dir=REPO)
        text = out.read_bytes().decode()
        assert text.startswith("# Reproduction: MInTRL vs GRPO") and "an older core report" not in text
        assert text.endswith(f"\n\n{kept}") and text.count(markers(CONFIRM)[0]) == 1


def test_the_agents_writer_keeps_the_confirm_block_byte_for_byte(tmp_path):
    sql = tmp_path / "sql"
    for job, experiment in enumerate(("agent/grpo8_cpu", "agent/rail8_cpu")):
        write_job(sql / str(job), ["seed=0", f"experiment={experiment}", "data=sql_schema"], {"val/pass@1": [(0, 0.1)]})
    out = tmp_path / "reproduction.md"
    before = f"# core\n\n{AGENTS_BLOCK}\n\n"
    after = "\n"
    out.write_bytes(f"{before}{CONFIRM_BLOCK}{after}".encode())
    write_agents_report(sql, out, repo_dir=REPO)
    text = out.read_bytes().decode()
    start, end = block_span(text, CONFIRM)
    assert text[start:end] == CONFIRM_BLOCK and text.endswith(CONFIRM_BLOCK + after)
    assert "## RAIL at equal budget on agent tasks" in text[: block_span(text, AGENTS)[1]]


def test_the_confirm_writer_keeps_every_other_byte(tmp_path):
    out = tmp_path / "reproduction.md"
    before, after = "# core \r\n\n" + AGENTS_BLOCK + "\n\n", "\ntrailing text\n"
    out.write_bytes(f"{before}{CONFIRM_BLOCK}{after}".encode())
    plan = small_plan(tmp_path / "sweep")
    write_confirmation([core_job(tmp_path / "runs", "grpo", 100, 0.2)], None, out, core_sweep=plan)
    text = out.read_bytes().decode()
    start, end = block_span(text, CONFIRM)
    assert text[:start] == before and text[end:] == after
    assert "## Confirmation at seeds fixed in advance" in text[start:end] and "kept as is" not in text
    fresh = tmp_path / "new.md"
    write_confirmation(None, None, fresh, core_sweep=plan)  # no file yet: the block alone
    assert fresh.read_text().startswith(markers(CONFIRM)[0]) and fresh.read_text().endswith(markers(CONFIRM)[1] + "\n")


def test_the_committed_confirm_section_names_the_plans_of_the_sweep_files():
    doc = (REPO / "docs" / "reproduction.md").read_text()
    start, end = block_span(doc, CONFIRM)
    section = doc[start:end]
    assert section.splitlines()[1] == "## Confirmation at seeds fixed in advance"
    for sweep in (CORE_SWEEP, AGENTS_SWEEP):
        assert plan_line(read_plan(sweep_file(sweep))) in section


# --- the CLI and the make target ------------------------------------------------------------------------


def test_cli_prints_the_jobs_finished_and_the_verdicts(tmp_path, capsys):
    plan = small_plan(tmp_path / "sweep")
    folders = [str(f) for f in complete_core(tmp_path / "runs")]
    out = tmp_path / "r.md"
    assert confirm_main(["--core", *folders, "--out", str(out), "--core-sweep", str(plan)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:3] == [
        f"report: {out}",
        "confirm_core: 6 of 6 planned jobs finished, 0 not in the plan",
        "  (i) holds",
    ]
    assert printed[3] == "confirm_agents_db: 0 of 24 planned jobs finished, 0 not in the plan"
    with pytest.raises(SystemExit) as e:
        confirm_main(["--core", str(tmp_path / "nope"), "--out", str(out)])
    assert e.value.code == 2 and str(tmp_path / "nope") in capsys.readouterr().err


def test_make_confirm_report_reads_the_finished_folders_only(tmp_path):
    for name in ("b_s1", "a_s1", "c_s1"):
        (tmp_path / "results" / "confirm_core" / name / "0").mkdir(parents=True)
    (tmp_path / "results" / "confirm_agents_db" / "r_s2" / "0").mkdir(parents=True)
    for done in ("confirm_core/a_s1", "confirm_core/b_s1", "confirm_agents_db/r_s2"):
        (tmp_path / "results" / done / "0" / "summary.json").write_text("{}")
    cmd = ["make", "--no-print-directory", "-n", "-f", str(REPO / "Makefile"), "confirm-report", "STAMP="]
    dry = subprocess.run([*cmd, f"BIN={Path(sys.executable).parent}"], cwd=tmp_path, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.strip().endswith(
        "mintrl.cli.reproduce_confirm --core results/confirm_core/a_s1/ results/confirm_core/b_s1/ "
        "--agents results/confirm_agents_db/r_s2/ --out docs/reproduction.md"
    )
    assert "mintrl.cli.train" not in dry.stdout
