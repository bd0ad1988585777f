"""The ``localrun`` command line: one module per group of commands, registered in main.py."""
