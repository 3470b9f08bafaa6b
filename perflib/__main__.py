import sys

from perflib.cli import main

sys.exit(main())
