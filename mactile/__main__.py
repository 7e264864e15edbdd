import sys

from mactile.cli.main import main

sys.exit(main())
