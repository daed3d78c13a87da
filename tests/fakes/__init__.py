"""Plain-Python stand-ins for what the services stand on, held to the real ones'
contracts by tests that run on both."""
