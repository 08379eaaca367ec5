"""The HTTP side: the admin API, the dashboard, the customer portal, their security and OpenAPI."""
