"""`python -m mmspec`: the command line (the batch stage runs each cell this way)."""

from mmspec.cli import main

raise SystemExit(main())
