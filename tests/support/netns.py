"""Test hosts in network namespaces joined by point-to-point veth links (root only).

Each host is a namespace ``<prefix>-<host>`` with one service address (a /32
on its loopback, in 10.213.<net>.0/24) and, for every link, a veth pair whose
ends carry a /32 route to the peer's address. A partition is made by taking
links down (both ends: the kernel drops their routes) and healed by bringing
them up and adding the routes again, so any pair of hosts can be cut apart
without touching the others: broker from ZooKeeper only, broker from its
peers and clients only, or both.

Nothing here routes to or from the root namespace: traffic between the
test's hosts never leaves the namespaces the run creates, and ``destroy()``
(also run for leftovers of an earlier run with the same prefix) deletes them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from itertools import combinations


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    return None


def process_prefix(tag: str) -> str:
    """A namespace prefix of its own for this process: ``tag`` (one character) and the pid
    in base 36 (5 digits hold any pid), so that test sessions side by side, or xdist
    workers, never create, cut or destroy each other's namespaces and links."""
    assert len(tag) == 1
    digits, pid = "", os.getpid()
    while pid:
        pid, d = divmod(pid, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[d] + digits
    return tag + digits.rjust(5, "0")


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


class Network:
    """Hosts and the links between them; ``cut``/``heal`` take links down and up."""

    def __init__(self, prefix: str, hosts: list[str], links: list[tuple[str, str]] | None = None,
                 net: int = 213) -> None:
        assert len(prefix) <= 6, "interface names are at most 15 characters"
        self.prefix = prefix
        self.hosts = list(hosts)
        self.links = [tuple(sorted(link)) for link in (links or list(combinations(hosts, 2)))]
        subnet = int(prefix.encode().hex(), 16) % 250 + 1
        self._addr = {h: f"10.{net}.{subnet}.{i + 1}" for i, h in enumerate(hosts)}
        self._dev: dict[tuple[str, str], str] = {}  # (host, peer) -> that host's end of the link
        for i, (a, b) in enumerate(self.links):
            self._dev[(a, b)] = f"{prefix}{i}a"
            self._dev[(b, a)] = f"{prefix}{i}b"
        self.cut_links: set[tuple[str, str]] = set()

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def address(self, host: str) -> str:
        return self._addr[host]

    def exec_prefix(self, host: str) -> list[str]:
        """Prefix a command with this to run it inside ``host``."""
        return ["ip", "netns", "exec", self.ns(host)]

    # ----------------------------------------------------------- lifecycle

    def create(self) -> Network:
        self.destroy()
        try:
            for h in self.hosts:
                _ip("netns", "add", self.ns(h))
                _ip("link", "set", "lo", "up", ns=self.ns(h))
                _ip("addr", "add", f"{self.address(h)}/32", "dev", "lo", ns=self.ns(h))
            for a, b in self.links:
                da, db = self._dev[(a, b)], self._dev[(b, a)]
                _ip("link", "add", da, "type", "veth", "peer", "name", db)
                _ip("link", "set", da, "netns", self.ns(a))
                _ip("link", "set", db, "netns", self.ns(b))
                self._up(a, b)
        except Exception:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        """Delete every namespace of this prefix (their links go with them)."""
        listed = _ip("netns", "list", check=False).stdout.split()
        for name in listed:
            if name.startswith(f"{self.prefix}-"):
                _ip("netns", "del", name, check=False)
        for host, peer in self._dev:  # a veth left in the root namespace by a failed create
            _ip("link", "del", self._dev[(host, peer)], check=False)

    # ---------------------------------------------------------- partitions

    def _link(self, a: str, b: str) -> tuple[str, str]:
        link = tuple(sorted((a, b)))
        if link not in self.links:
            raise KeyError(f"no link between {a} and {b}")
        return link  # type: ignore[return-value]

    def _up(self, a: str, b: str) -> None:
        for host, peer in ((a, b), (b, a)):
            dev = self._dev[(host, peer)]
            _ip("link", "set", dev, "up", ns=self.ns(host))
            _ip("route", "replace", f"{self.address(peer)}/32", "dev", dev, "src",
                self.address(host), ns=self.ns(host))

    def cut(self, a: str, b: str) -> None:
        link = self._link(a, b)
        for host, peer in ((a, b), (b, a)):
            _ip("link", "set", self._dev[(host, peer)], "down", ns=self.ns(host))
        self.cut_links.add(link)

    def heal(self, a: str, b: str) -> None:
        link = self._link(a, b)
        self._up(a, b)
        self.cut_links.discard(link)

    def isolate(self, host: str, peers: list[str]) -> None:
        for p in peers:
            self.cut(host, p)

    def heal_all(self) -> None:
        for a, b in list(self.cut_links):
            self.heal(a, b)
