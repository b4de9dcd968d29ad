"""Pure string code shared by several components: step splitting of a chunk (judges,
interventions) and locating the final answer of a response (rewards, the rule judge)."""
