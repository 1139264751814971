import sys

from grader.host.cli import main

sys.exit(main())
