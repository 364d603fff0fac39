"""The principal of a TLS client: its certificate's subject as an RFC 2253 name
(what Java's X500Principal.getName() gives Kafka), mapped by
ssl.principal.mapping.rules (Kafka's SslPrincipalMapper), as `User:<name>`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from moldau.protocol.errors import InvalidConfigError

ANONYMOUS = "User:ANONYMOUS"

# OpenSSL's long names (Python's getpeercert) -> the keywords RFC 2253 names print.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}

# One rule and the separator after it: DEFAULT, or RULE:pattern/replacement/[LU]
# (a slash inside pattern or replacement escaped, \/), as Kafka splits them.
_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])*)/"
    r"(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?)[^,]*?)\s*(?:,\s*|$)"
)


def _escape(value: str) -> str:
    """RFC 2253 escaping of an attribute value."""
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def rfc2253_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """A subject as ssl.getpeercert() gives it (RDNs in certificate order) as an
    RFC 2253 string: the last RDN first, `CN=client,O=Example,C=DE`."""
    rdns = ["+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn) for rdn in subject]
    return ",".join(reversed(rdns))


def _java_replacement(replacement: str, groups: int) -> str:
    """Java's replacement syntax ($1, \\x literal) in Python's (\\g<1>). A
    reference past the pattern's groups is cut to one that exists, else is
    literal, as Kafka escapes it ($12 with one group: group 1, then "2")."""
    out = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            # Java: \x is x itself; in Python's template only a backslash needs one.
            out.append("\\\\" if replacement[i + 1] == "\\" else replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            digits = replacement[i + 1 : j]
            while int(digits) > groups and len(digits) > 1:
                digits = digits[:-1]
            if int(digits) > groups:
                out.append("$" + digits)
            else:
                out.append(f"\\g<{digits}>")
            i += 1 + len(digits)
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self.replacement, name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


class PrincipalMapper:
    """ssl.principal.mapping.rules: the first rule that matches the whole name
    gives the principal's name; none matching refuses the client (Kafka's
    NoMatchingRule fails the connection's authentication)."""

    def __init__(self, rules: str) -> None:
        self.rules = parse_rules(rules)

    def name(self, distinguished_name: str) -> str | None:
        for rule in self.rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        return None


def parse_rules(text: str) -> list[_Rule]:
    text = " ".join(text.split())  # rules may be given over several lines
    rules: list[_Rule] = []
    pos = 0
    while pos < len(text):
        m = _RULE.match(text, pos)
        if m is None or m.end() == pos:
            raise InvalidConfigError(
                f"Invalid rule in ssl.principal.mapping.rules at {text[pos:]!r}: expected "
                "DEFAULT or RULE:pattern/replacement/[LU]"
            )
        if m.group("default"):
            rules.append(_Rule(None))
        else:
            try:
                pattern = re.compile(m.group("pattern"))
            except re.error as e:
                raise InvalidConfigError(
                    f"Invalid pattern in ssl.principal.mapping.rules {m.group('pattern')!r}: {e}"
                ) from None
            replacement = _java_replacement(m.group("replacement"), pattern.groups)
            rules.append(_Rule(pattern, replacement, m.group("case")))
        pos = m.end()
    return rules or [_Rule(None)]


def ssl_principal(peer_cert: dict[str, Any] | None, mapper: PrincipalMapper) -> str | None:
    """`User:<mapped subject>`, ANONYMOUS without a client certificate, None if no
    rule maps its subject (the client is then refused)."""
    if not peer_cert or not peer_cert.get("subject"):
        return ANONYMOUS
    name = mapper.name(rfc2253_name(peer_cert["subject"]))
    return None if name is None else f"User:{name}"
