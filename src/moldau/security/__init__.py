"""Authentication, sans-IO: SASL mechanisms as state machines fed tokens, the JAAS
config parser, and the SCRAM credential cache. Nothing here touches a socket or the
event loop; the SaslHandshake/SaslAuthenticate handlers drive these."""
