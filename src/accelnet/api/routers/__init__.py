"""The API's routes: thin, each one calls a service of :class:`~accelnet.api.context.ApiContext`."""
