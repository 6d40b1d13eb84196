"""``python -m rabbitry``: the ``rabbitry`` command where its console script is not on PATH
(a virtualenv not activated, a Spark driver's interpreter)."""

from rabbitry.cli import main

if __name__ == "__main__":
    main()
