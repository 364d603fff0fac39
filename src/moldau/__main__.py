import sys

from moldau.cli.main import main

sys.exit(main())
