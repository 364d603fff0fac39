"""A TLS client's principal: its certificate's subject as Kafka prints it (RFC 2253,
most specific first), mapped by ssl.principal.mapping.rules as Kafka's
SslPrincipalMapper does."""

from __future__ import annotations

import pytest

from moldau.protocol.errors import InvalidConfigError
from moldau.security.ssl_principal import (
    ANONYMOUS,
    PrincipalMapper,
    rfc2253_name,
    ssl_principal,
)

# As ssl.getpeercert() gives it: RDNs in certificate order.
SUBJECT = (
    (("countryName", "DE"),),
    (("organizationName", "Example, Inc."),),
    (("organizationalUnitName", "ServiceUsers"),),
    (("commonName", "alice"),),
)
DN = "CN=alice,OU=ServiceUsers,O=Example\\, Inc.,C=DE"


def test_subject_as_kafka_prints_it() -> None:
    assert rfc2253_name(SUBJECT) == DN
    multi = ((("commonName", "a"), ("userId", "7")), (("domainComponent", " x#"),))
    assert rfc2253_name(multi) == "DC=\\ x#,CN=a+UID=7"


def test_default_rule_keeps_the_whole_name() -> None:
    assert ssl_principal({"subject": SUBJECT}, PrincipalMapper("DEFAULT")) == f"User:{DN}"


def test_rules_in_order_first_full_match_wins_with_case() -> None:
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=Admins,.*$/admin-$1/U, "
        "RULE:^CN=(.*?),OU=ServiceUsers,.*$/$1/L,\n DEFAULT"
    )
    assert mapper.name(DN.replace("alice", "Bob")) == "bob"
    assert mapper.name("CN=carol,OU=Admins,O=x") == "ADMIN-CAROL"
    assert mapper.name("CN=dave,O=x") == "CN=dave,O=x"  # DEFAULT


def test_no_matching_rule_refuses_the_client() -> None:
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=Admins,.*$/$1/")
    assert ssl_principal({"subject": SUBJECT}, mapper) is None


def test_escapes_and_references_as_java_reads_them() -> None:
    assert PrincipalMapper("RULE:^CN=(.*)$/svc\\/$1/").name("CN=x") == "svc/x"
    # An escaped slash in the pattern, a literal dot and dollar in the replacement.
    mapper = PrincipalMapper(r"RULE:^CN=(.*?)\/(.*?),.*$/$2\.$1\$/")
    assert mapper.name("CN=a/b,O=x") == "b.a$"
    # References past the groups: cut to one that exists ($12 -> $1, "2"), else literal.
    assert PrincipalMapper("RULE:^CN=(.*)$/$12-$3/").name("CN=x") == "x2-$3"


def test_no_certificate_is_anonymous() -> None:
    assert ssl_principal(None, PrincipalMapper("DEFAULT")) == ANONYMOUS
    assert ssl_principal({}, PrincipalMapper("RULE:^(.*)$/$1/")) == ANONYMOUS


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "SOMETHING", "RULE:abc"])
def test_bad_rules_are_config_errors(rules: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"ssl\.principal\.mapping\.rules"):
        PrincipalMapper(rules)
