"""Inbound inter-node HTTP: one request core (core.py), an adapter per protocol (h1.py, h2.py)
and the asyncio TLS server that picks the adapter per connection (server.py)."""
