"""Searched method entries: hyperparameters given as domains, explored in rounds.

A method entry with a `search` block gives some hyperparameters as domains (a list of choices,
or a range `{low, high}`) instead of grid lists. Its cells are chosen in rounds: round 1 is a
space-filling design, each later round asks a multi-objective optimizer for the next points given
every finished cell of the search's earlier rounds. A proposed point is an ordinary cell (a point
another entry's grid already holds is that entry's cell, decoded once).

- `optimizer`: a round's points, a pure function of the search, the round and the history.
- `rounds`: the round files under results/search and the cells they name.

What a sweep's configuration holds of a search is the sweep's: the searched entry, validated
(`sweep.search_space`), a search per dataset and pair and its cells (`sweep.search_runs`), and
the volume a frontier dominates (`sweep.hypervolume`).
"""
