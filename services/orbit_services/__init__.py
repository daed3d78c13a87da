"""The Orbit server: the services, their shared runtime, the store and the server commands."""
