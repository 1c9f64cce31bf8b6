"""``python -m actors`` is the ``otpjobs`` console command."""
import sys

from .cli import main

sys.exit(main())
