"""Device care in the live system: health checks, remediation, power and energy."""
