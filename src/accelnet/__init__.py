"""accelnet."""
