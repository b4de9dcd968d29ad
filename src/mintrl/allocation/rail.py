"""``allocation=rail``: RAIL's learned branching (RAIL section 3.2) over MInTRL's rollouts."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from mintrl.allocation.base import Allocation
from mintrl.allocation.decisions import BranchDecision, DecisionKind, DecisionLog
from mintrl.allocation.features import FEATURES, anchor_features, pool_entropy
from mintrl.allocation.gain import realized_gain
from mintrl.allocation.rail_controller import RailController

SHADOW = DecisionKind("shadow", "RAIL's shadow phase: budgets tried in increasing order, accept-or-stop")
LIVE = DecisionKind("live", "RAIL's live phase: the controller's best action past the gate (eq. 10)")
EXPLORE = DecisionKind("explore", "a live decision that took a uniformly random action (probability rho_t)")


def _mean(values):
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


class RailAllocation(Allocation):
    """Per prompt, the ``anchors_per_prompt`` highest-entropy anchors of its control rollouts are
    offered to the :class:`RailController`: in the shadow phase it tries budgets in increasing order
    while the group's reward variance grows (accept-or-stop: a branch that does not raise it is
    discarded); in the live phase it branches with its best action when the predicted gain passes the
    gate (eq. 10). Every executed branch is a trace ``(z, b, y)``.

    Args:
        budget_per_step: rollouts per optimizer step, initial ones included (a hard cap).
        spend_all: spend what the controller left of the budget on fresh rollouts
            (:attr:`mintrl.allocation.base.Allocation.spend_all`).
        anchors_per_prompt: anchors considered per prompt and step.
        controller: keyword arguments of :class:`RailController` (budgets, temperatures, window,
            promote_after, gate, rho0, rho_steps, decay, delta, refit_every, fit_steps, lr, hidden, seed,
            intervene_lengths: beyond the paper, judge-review-plus-correction actions; empty = off).
    """

    decision_kinds = (SHADOW, LIVE, EXPLORE)

    def __init__(self, budget_per_step: int, anchors_per_prompt: int = 1, spend_all: bool = False, **controller):
        if budget_per_step <= 0 or anchors_per_prompt <= 0:
            raise ValueError(
                f"allocation.budget_per_step and anchors_per_prompt must be positive, got {budget_per_step}, {anchors_per_prompt}"
            )
        self.budget_per_step, self.anchors_per_prompt = budget_per_step, anchors_per_prompt
        self.spend_all = bool(spend_all)
        self.rail = RailController(len(FEATURES), **controller)
        self.failed: Counter = Counter()  # failed anchors per prompt (keyed by question)
        self.decisions = DecisionLog(self.decision_kinds)

    def _state(self, surprisal, step, steps, budget, group, item, brancher):
        """The anchor's state ``z`` (:func:`mintrl.allocation.features.anchor_features`); the
        brancher gives the group's diversity (answers for text, action-kind sequences for episodes)."""
        return anchor_features(
            surprisal,
            step,
            steps,
            budget.used_fraction,
            [r.reward for r in group],
            self.failed[item.question],
            pool_entropy(group),
            brancher.diversity(group),
        )

    def allocate(self, rollouts, items, brancher, budget, delimiters):
        """Branches kept (scored rollouts) and the step's ``allocation/*`` stats."""
        groups = defaultdict(list)
        for r in rollouts:
            groups[r.group].append(r)
        kept, log = [], Counter()
        predicted, realized, actions = [], [], Counter()
        for g, group in sorted(groups.items()):
            item = items[g]
            candidates = sorted(
                (
                    (a.surprisal, r, a.token, a.step, a.steps)
                    for r in group
                    if r.is_control
                    for a in brancher.anchors(r, delimiters)
                ),
                key=lambda c: -c[0],
            )[: self.anchors_per_prompt]
            for surprisal, parent, k, step, steps in candidates:
                z = self._state(surprisal, step, steps, budget, group, item, brancher)
                kind = SHADOW
                if self.rail.phase == "shadow":
                    hard = not any(r.reward >= 1.0 for r in group)
                    trials = self.rail.shadow_plan(hard)
                else:
                    action, _ = self.rail.decide(z)
                    kind = EXPLORE if self.rail.last_explored else LIVE
                    log["decisions"] += 1
                    if action is None:
                        continue
                    log["gate_passed"] += 1
                    trials = [action]
                for action in trials:
                    m = budget.take(self.rail.actions[action].budget)
                    if m == 0:
                        break
                    guess = float(self.rail.predict(z)[action])
                    act = self.rail.actions[action]
                    children = (
                        brancher.intervene(parent, k, act.intervene, item)
                        if act.intervene
                        else brancher.branch(parent, k, m, act.temperature, item)
                    )
                    gain = realized_gain([r.reward for r in group], [c.reward for c in children])
                    shadow = self.rail.phase == "shadow"  # before record(): the trace may promote it
                    self.rail.record(z, action, gain)
                    predicted.append(guess)
                    realized.append(gain)
                    actions[action] += 1
                    log["branches"] += 1
                    keep = gain > 0 or not shadow  # a shadow trial is kept only when it raised the variance
                    self.decisions.add(
                        BranchDecision(kind.name, g, act.name, len(children), guess, gain, keep, surprisal)
                    )
                    if keep:
                        group += children
                        kept += children
                    if gain <= 0:
                        self.failed[item.question] += 1
                        break  # accept-or-stop
                    z = self._state(surprisal, step, steps, budget, group, item, brancher)  # the next trial's state
        stats = {
            "allocation/branches": float(log["branches"]),
            "allocation/live": float(self.rail.phase == "live"),
            "allocation/traces": float(self.rail.recorded),
        }
        if log["decisions"]:
            stats["allocation/gate_pass_rate"] = log["gate_passed"] / log["decisions"]
        if predicted:
            stats["allocation/predicted_gain"] = _mean(predicted)
            stats["allocation/realized_gain"] = _mean(realized)
        if not math.isnan(self.rail.last_loss):
            stats["allocation/controller_loss"] = self.rail.last_loss
        for a, act in enumerate(self.rail.actions):  # the action histogram (every action, every step)
            stats[f"allocation/action_{act.name}"] = float(actions[a])
        return kept, stats

    def take_decisions(self) -> list[BranchDecision]:
        """The branches executed since the last call (shadow trials, live and exploratory decisions)."""
        return self.decisions.take()

    def state_dict(self) -> dict:
        return {"rail": self.rail.state_dict(), "failed": dict(self.failed)}

    def load_state_dict(self, state: dict) -> None:
        self.rail.load_state_dict(state["rail"])
        self.failed = Counter(state["failed"])
