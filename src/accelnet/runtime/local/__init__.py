"""Running tasks on this machine: worker processes per device, tenants' users, hand-off."""
