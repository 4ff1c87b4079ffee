"""`python -m chakra_core.cli ...`: the `chakra` command."""

import sys

from chakra_core.cli import main

sys.exit(main())
