"""Security: sans-IO models and decisions (no asyncio, no sockets)."""
