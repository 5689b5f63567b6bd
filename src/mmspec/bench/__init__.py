"""Benchmarks that mmspec runs itself (the GPU check's), importable from an installed package.

The scripts under benchmarks/ are their command lines; `python -m mmspec.bench.<name>` runs the
same code without a clone.
"""
