"""Simulation: step-level environments and the discrete-event serving simulator.

Imports ``nightjar_ray.policy``, never ``nightjar_ray.engine``.
"""
