"""`python -m inspo_engine …` runs the command-line interface."""

from .cli import main

raise SystemExit(main())
