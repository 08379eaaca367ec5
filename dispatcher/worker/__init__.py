"""The worker: one event loop that claims, sends and records deliveries."""
