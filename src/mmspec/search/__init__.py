"""Searched method entries: hyperparameters given as domains, explored in rounds.

A method entry with a `search` block gives some hyperparameters as domains (a list of choices,
or a range `{low, high}`) instead of grid lists. Its cells are chosen in rounds: round 1 is a
space-filling design, each later round asks a multi-objective optimizer for the next points given
every finished cell of the search's earlier rounds. A proposed point is an ordinary cell (a point
another entry's grid already holds is that entry's cell, decoded once).

- `space`: the searched entry, validated (domains, objectives, constraints, budget, sampler).
- `optimizer`: a round's points, a pure function of the search, the round and the history.
- `rounds`: the round files under results/search and the cells they name.
- `hypervolume`: the volume a frontier dominates.
"""
