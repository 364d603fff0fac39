"""Client quotas (Kafka's ClientQuotaManager and friends), sans-IO: the quota
entities and their znode names, the rates measured over sampled windows, and the
throttle time of a client over its quota. The broker feeds them (server/quotas.py)."""
