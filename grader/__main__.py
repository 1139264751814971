import sys

from grader.host.main import main

sys.exit(main())
