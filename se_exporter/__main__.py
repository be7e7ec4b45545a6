"""``python -m se_exporter``."""

import sys

from se_exporter.cli import main

sys.exit(main())
