"""Running tasks across a Ray cluster: the driver's backend, the agents on the nodes."""
