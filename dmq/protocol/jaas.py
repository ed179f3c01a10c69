"""Kafka's JAAS configuration lines, as ``sasl.jaas.config`` holds them. Pure.

``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";`` is one
login module with its options: ``username``/``password`` are what the broker itself logs
in with (inter-broker), ``user_<name>`` the PLAIN users a listener accepts. Values may be
quoted (``"..."`` with backslash escapes) or bare words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r'\s*(?:(?P<key>[A-Za-z_][\w.-]*)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))'
                    r'|(?P<word>[^\s=;"]+)|(?P<end>;))', re.DOTALL)


class JaasError(ValueError):
    """A JAAS line that does not parse."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """PLAIN's ``user_<name>="<password>"`` options."""
        return {k[len("user_"):]: v for k, v in self.options.items() if k.startswith("user_")}

    def __repr__(self) -> str:  # never show passwords
        return f"JaasEntry({self.login_module!r}, {self.flag!r}, options={sorted(self.options)})"


def parse_jaas(text: str) -> JaasEntry:
    """The first login module of ``text``; JaasError says what is wrong (never the values)."""
    words: list[str] = []
    options: dict[str, str] = {}
    pos = 0
    text = text.strip()
    ended = False
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise JaasError(f"cannot parse sasl.jaas.config at character {pos}")
        pos = m.end()
        if m.group("end"):
            ended = True
            break
        if m.group("word"):
            if options:
                raise JaasError("sasl.jaas.config: a word after the options")
            words.append(m.group("word"))
            continue
        quoted = m.group("quoted")
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else m.group("bare")
        options[m.group("key")] = value
    if len(words) != 2:
        raise JaasError("sasl.jaas.config must be '<LoginModule class> <flag> key=\"value\" ... ;'")
    if not ended:
        raise JaasError("sasl.jaas.config must end with ';'")
    if words[1] not in ("required", "requisite", "sufficient", "optional"):
        raise JaasError(f"sasl.jaas.config: unknown control flag {words[1]!r}")
    return JaasEntry(words[0], words[1], options)
