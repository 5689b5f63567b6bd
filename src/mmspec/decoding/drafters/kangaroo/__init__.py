"""Kangaroo's trained adapter: its drafter (`drafter`), network (`net`) and loss (`loss`)."""

from mmspec.decoding.drafters.kangaroo.drafter import KangarooDrafter

__all__ = ["KangarooDrafter"]
