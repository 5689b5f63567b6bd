"""EAGLE's trained head: its drafter (`drafter`), network (`net`) and loss (`loss`)."""

from mmspec.decoding.drafters.eagle.drafter import EagleDrafter

__all__ = ["EagleDrafter"]
