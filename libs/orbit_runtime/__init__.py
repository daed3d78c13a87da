"""What Orbit's services share: settings, the event store, the broker, lifecycles."""
