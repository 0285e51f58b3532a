"""Task execution: the controller (reconcile loop), the durable store, execution backends.

I/O lives here (processes, SQLite, the real clock); the decisions come from
:mod:`accelnet.sched`, which this package drives.
"""
