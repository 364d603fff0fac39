"""Kafka's JAAS configuration syntax (JaasConfig), as `sasl.jaas.config` values take it:

    <LoginModuleClass> <flag> [key=value ...];  [another module ...]

Values are words or double-quoted strings (backslash escapes the next character);
`//` and `/* */` comments are skipped. Errors are ValueError with the reason."""

from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
# Characters of an unquoted word, besides letters and digits (Kafka's tokenizer adds
# these to its word characters so that class names and option keys read whole).
_WORD_EXTRA = frozenset("-_$.")


@dataclass(frozen=True, slots=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, value) pairs: kind is 'word', 'quoted' or the punctuation itself."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError("unterminated comment in JAAS config")
            i = end + 2
        elif c == '"':
            i += 1
            chars: list[str] = []
            while True:
                if i >= n:
                    raise ValueError("unterminated quoted value in JAAS config")
                if text[i] == "\\" and i + 1 < n:
                    chars.append(text[i + 1])
                    i += 2
                elif text[i] == '"':
                    i += 1
                    break
                else:
                    chars.append(text[i])
                    i += 1
            out.append(("quoted", "".join(chars)))
        elif c.isalnum() or c in _WORD_EXTRA:
            start = i
            while i < n and (text[i].isalnum() or text[i] in _WORD_EXTRA):
                i += 1
            out.append(("word", text[start:i]))
        else:
            out.append((c, c))
            i += 1
    return out


def parse_jaas(text: str) -> list[LoginModule]:
    """The login modules of a JAAS config value, in order."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0

    def take(kinds: tuple[str, ...], what: str) -> str:
        nonlocal i
        if i >= len(tokens) or tokens[i][0] not in kinds:
            got = "the end" if i >= len(tokens) else repr(tokens[i][1])
            raise ValueError(f"JAAS config: expected {what}, got {got}")
        i += 1
        return tokens[i - 1][1]

    while i < len(tokens):
        name = take(("word",), "a login module class name")
        flag = take(("word",), "a control flag").lower()
        if flag not in FLAGS:
            raise ValueError(f"JAAS config: invalid control flag {flag!r}")
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            key = take(("word",), "an option name or ';'")
            take(("=",), f"'=' after {key}")
            options[key] = take(("word", "quoted"), f"a value for {key}")
        take((";",), "';' at the end of a login module")
        modules.append(LoginModule(name, flag, options))
    if not modules:
        raise ValueError("JAAS config: no login module")
    return modules


def parse_single(text: str) -> LoginModule:
    """A `sasl.jaas.config` value, which Kafka requires to hold exactly one module."""
    modules = parse_jaas(text)
    if len(modules) != 1:
        raise ValueError(
            f"JAAS config property contains {len(modules)} login modules, should be 1 module"
        )
    return modules[0]
