"""The trace-driven simulator: the live controller and scheduler on a virtual clock.

A :class:`~accelnet.sim.engine.Simulation` drives the very :class:`Controller` the live
system runs, with a :class:`~accelnet.runtime.clock.ManualClock`, a
:class:`~accelnet.sim.backend.SimBackend` (jobs advance at their throughput on their
devices) and a :class:`~accelnet.runtime.control.store.MemoryStore`; traces come from
:mod:`accelnet.sim.traces`, rates from :mod:`accelnet.sim.throughput`, figures from
:mod:`accelnet.sim.metrics`.
"""
