"""The workflow's DAG: what the Snakefile's rules read of a sweep (`sweep_dag.SweepDag`), the
top floor beside the command line: it reads the sweep, its batches, searches and claims."""
