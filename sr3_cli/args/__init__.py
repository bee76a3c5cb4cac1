"""The ``sr3`` command line's options, one module per sub-command: argparse only.

``sr3 --help``, ``sr3 node`` and every other command build the whole parser
from these modules, so they import nothing heavy (no pyspark, kazoo or engine
bridge): a sub-command's handler is named by module and function
(:func:`~sr3_cli.args.common.handler`) and imported only when it runs. Each
option is defined once, here; the handler modules never define options.
"""
