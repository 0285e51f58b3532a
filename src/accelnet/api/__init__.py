"""The REST API (``accelnet serve``): jobs, devices, fabric, tenants and quotas, policy,
events, audit; bearer tokens with roles, tenant isolation, limits. docs/api.md.

``create_app(build_context(port, db, clock))`` makes the FastAPI application over a
running cluster (:class:`~accelnet.api.port.ClusterPort`); :mod:`accelnet.api.server`
runs it with the controller in one process.
"""
