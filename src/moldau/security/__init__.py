"""Security, sans-IO: SASL mechanisms as state machines fed tokens, the JAAS config
parser, the SCRAM credential cache, the ACL model and the authorizer's decisions.
Nothing here touches a socket or the event loop; the server's handlers drive these."""
