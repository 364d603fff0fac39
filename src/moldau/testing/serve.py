"""`moldau serve` as `BrokerProcess` runs it: Moldau's own main, in a process where
hypothesis cannot be imported.

kio imports hypothesis whenever it is installed (to register strategies for its
types), which costs a broker 0.1-0.2 s of CPU at every start and is never used
there. The tests' venv has hypothesis; a user's broker does not: without it the
tests' brokers start as a user's do, and sooner (they start hundreds of times a
run).
"""

import sys

sys.modules["hypothesis"] = None  # type: ignore[assignment]  # makes `import hypothesis` fail

from moldau.cli.main import main  # noqa: E402 (after the block above)

sys.exit(main())
