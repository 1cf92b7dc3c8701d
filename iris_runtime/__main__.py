"""``python -m iris_runtime`` is the ``iris`` command."""

from iris_runtime.cli import main

if __name__ == "__main__":
    main()
