"""Our decoding engine vs Hugging Face `generate`, on the same Llava pair, samples and pixels.

The benchmark itself is `mmspec.bench.engine` (what it times and why it is fair: its
docstring); this script is its command line, `python -m mmspec.bench.engine` the same without a
clone. Exit status 1 if mmspec's outputs differ from HF greedy `generate`.
"""

import sys

from mmspec.bench.engine import main

if __name__ == "__main__":
    sys.exit(main())
