"""Moldau's web console: a small aiohttp server (server.py) over a Kafka client
(cluster.py) that reads and changes a cluster through the Kafka protocol, and a
plain-JavaScript front end in static/. `moldau ui` runs it against any
Kafka-compatible cluster; `moldau serve --ui-port` runs it beside the broker."""
