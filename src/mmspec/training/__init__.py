"""Training loops: drafter heads on the target's own features."""
