"""The registry's method rows, one module per paper or baseline family; `methods.registry`
gathers them in the order the method catalogue (docs/reference/methods.md) lists them.

  row           what a row is (`Method`) and the component defaults rows start from
  baselines     AR, SD and the draft-model baselines the papers compare with (SPD, SD-chain,
                SD-Tree, EAGLE-2 trees)
  tabed         TABED: single views, static and adaptive ensembles, its tree
  sage_specvlm  SpecVLM's pruned view and SAGE's entropy-adaptive trees
  lantern       LANTERN's relaxed acceptance for image generation and its ablations
  lvspec        LVSpec's loose verification and the loose baselines it compares with (FLy)
  heads         trained heads on the target's features: EAGLE, EAGLE-2, Medusa, Hydra, Kangaroo
  dream         DREAM and its ablations

Each row's description (and its module's docstring) names the paper section or release file its
defaults come from.
"""
