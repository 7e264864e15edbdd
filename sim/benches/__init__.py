"""Testbenches (:class:`mactile.sim.Bench` subclasses) of the registered designs."""
