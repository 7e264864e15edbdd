"""The ``mactile`` command line: one module per subcommand, registered in :mod:`.main`."""
