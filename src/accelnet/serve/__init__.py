"""Services: a command serving HTTP, kept up as replicas (jobs of the scheduler) behind one
router, grown and shrunk with the load to a latency goal, on the devices that meet it at the
least power.

- :mod:`accelnet.serve.spec` -- :class:`ServiceSpec` (replicas, goal, scaling, readiness).
- :mod:`accelnet.serve.router` -- the router: weighted least-outstanding-requests, retries
  of requests a dead replica never answered, 429 back-pressure, streaming.
- :mod:`accelnet.serve.autoscale` -- the pure scaling rule and the choice of device model.
- :mod:`accelnet.serve.service` -- :class:`Service`, which runs them on a cluster.
"""
