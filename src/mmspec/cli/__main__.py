"""`python -m mmspec.cli`: the command line, as `python -m mmspec` runs it."""

from mmspec.cli import main

raise SystemExit(main())
