"""A sweep: its configuration loaded and checked (`config`, `settings`: typed sections), its cells
(`cells`), what each reads and is keyed by (`cell_inputs`, `cell_keys`, `jobs`), the metrics of
its cells table (`cell_metrics`), its model references and searched entries (`model_refs`,
`search_space`, `search_runs`, `hypervolume`)."""
