"""``python -m sr3_cli`` runs the ``sr3`` command."""

import sys

from sr3_cli.main import main

sys.exit(main())
