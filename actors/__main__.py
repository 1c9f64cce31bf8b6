"""``python -m actors`` is the ``otpjobs`` console command."""

import sys

from actors.cli import main

sys.exit(main())
