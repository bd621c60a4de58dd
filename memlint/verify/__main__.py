import sys

from memlint.verify.cli import main

sys.exit(main(sys.argv[1:]))
