"""Acceptance rules: how the target's verification pass judges a proposal.

A rule takes the proposal, the target's logits at [root, node_0, ..., node_{n-1}] (row 0
predicts the first node; row i + 1 what follows node i), the temperature and a sampler, and
returns the accepted path (node indices, root excluded) and the next token the target emits after
it (correction or bonus). Each rule is a component (a `rule.Rule`, declared beside its judge
function: greedy, sampling, lantern, loose) stating whether it preserves
the target's distribution (lossless ones are checked against AR and by `mmspec
verify-lossless`) and the hyperparameters it reads; LANTERN also reads the target's codebook,
LVSpec the target's hidden states (`reads_hidden`: the drafted nodes' from the verification
forward and the visual tokens' from the prefill, passed as `hidden` and `visual`). A lossy rule
returns a third value, the number of accepted nodes it relaxed.
"""
