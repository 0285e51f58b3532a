"""The controller and what it keeps: the reconcile loop, its runs and devices, the store."""
