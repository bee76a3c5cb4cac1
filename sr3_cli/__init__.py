"""The ``sr3`` command line: thin wiring of the other packages."""
