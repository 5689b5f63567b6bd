"""DREAM's trained head: its drafter (`drafter`), network (`net`), loss (`loss`) and the target's
intermediate features the loss reads (`intermediate`)."""

from mmspec.decoding.drafters.dream.drafter import DreamDrafter

__all__ = ["DreamDrafter"]
