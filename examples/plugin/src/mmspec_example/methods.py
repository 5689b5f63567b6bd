"""Method rows of the example's components, composed with mmspec's chain (registry presets)."""

from mmspec.api import Method

METHODS = [
    Method(
        "early_exit",
        "the target's first layer drafts a chain of 4 for the target (self-speculative)",
        {"drafter": "early_exit", "tree": "chain", "gamma": 4, "acceptance": "greedy"},
        "Early exit",
    ),
    Method(
        "early_exit_leviathan",
        "the early-exit drafter's chain, verified by plain speculative sampling",
        {"drafter": "early_exit", "tree": "chain", "gamma": 4, "acceptance": "leviathan"},
        "Early exit (Leviathan)",
    ),
    Method(
        "prompt_lookup",
        "a chain of up to 4 tokens copied from earlier in the prompt or output (no draft model)",
        {"drafter": "prompt_lookup", "tree": "chain", "gamma": 4, "acceptance": "greedy"},
        "Prompt lookup",
    ),
]
