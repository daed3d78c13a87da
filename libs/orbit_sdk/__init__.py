"""What Orbit's users import: the command line now; the worker SDK and client to come."""
