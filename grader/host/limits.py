"""The defaults of a check's limits, as `grade`'s options declare them: a leaf of the standard library, so that
`grade --help` builds its parser without importing the runner (numpy, pydantic: most of its time)."""

DEFAULT_TIMEOUT = 60.0  # seconds per check; the whole model's check takes a few on a laptop
DEFAULT_MEMORY_LIMIT_GB = 6.0  # memory a check's processes may add; the whole model needs about 1.5
DEVICES = ("cpu", "cuda", "mps", "auto")
