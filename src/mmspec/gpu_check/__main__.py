"""`python -m mmspec.gpu_check`: the same command as `mmspec gpu-check`."""

import sys

from mmspec.gpu_check.arguments import main

sys.exit(main())
