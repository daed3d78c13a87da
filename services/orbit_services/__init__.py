"""The Orbit services: thin wiring over orbit_runtime and orbit_model."""
