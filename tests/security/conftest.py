"""The API tests' fixtures (a real ``accelnet serve`` per module), reused here."""

from tests.api.conftest import server

__all__ = ["server"]
