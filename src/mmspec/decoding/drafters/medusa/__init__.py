"""Medusa's and Hydra's trained heads: their drafters (`drafter`), network (`net`) and loss
(`loss`)."""

from mmspec.decoding.drafters.medusa.drafter import MEDUSA_TREE, HydraDrafter, MedusaDrafter

__all__ = ["MEDUSA_TREE", "HydraDrafter", "MedusaDrafter"]
