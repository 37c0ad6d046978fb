"""Which URLs a run may reach: http(s) only, hosts on the operator's allow-list, no loopback, private, link-local or
reserved address unless the operator allowed that host; it knows no settings (the caller passes the policy).

`check_url` resolves the host and checks every address it resolves to; `GuardedTransport` does the same for each
request an httpx client sends (redirects included) and connects to the address it checked, so a DNS answer that
changes between the check and the connection cannot reach another host.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


class UrlRefused(ValueError):
    """A URL the policy does not allow; the message says why without contacting the host."""


def resolve_host(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (the system resolver)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class NetPolicy:
    """The operator's rules for URLs that users choose (a retriever, an optimizer base URL)."""

    allowed_hosts: tuple[str, ...] = ()
    """Hosts a URL may name: 'host' (any port), 'host:port', '[v6]:port', or '*.example.com' (its subdomains)."""
    private_hosts: tuple[str, ...] = ()
    """Entries of the same form that are allowed even though they resolve to loopback, private, link-local or
    reserved addresses (a self-hosted vLLM, a test's stub server); they need not be repeated in allowed_hosts."""
    resolve: Resolver = field(default=resolve_host, compare=False)
    """How host names become addresses (tests pass a fake)."""


@dataclass(frozen=True)
class Target:
    """A checked URL: its host, port, and the addresses it may be reached at."""

    host: str
    port: int
    addresses: tuple[str, ...]


def _is_public(address: IPAddress) -> bool:
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    if mapped is not None:
        return _is_public(mapped)
    return address.is_global and not address.is_multicast


def _split_entry(entry: str) -> tuple[str, str]:
    """('host', 'port' or '') of an allow-list entry: 'h', 'h:80', '[::1]:80', a bare IPv6 address."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        return name, rest.removeprefix(":")
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name.rstrip("."), port
    return entry.rstrip("."), ""


def _matches(entries: Sequence[str], host: str, port: int) -> bool:
    for entry in entries:
        name, entry_port = _split_entry(entry)
        if entry_port and entry_port != str(port):
            continue
        if name == host or (name.startswith("*.") and host.endswith(name[1:])):
            return True
    return False


def parse_target(url: str) -> tuple[str, int]:
    """The host (lower case, no brackets) and port of an http(s) URL; UrlRefused for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise UrlRefused(f"{url!r} is not a valid URL") from error
    if parts.scheme not in ("http", "https"):
        raise UrlRefused(f"{url!r}: the scheme must be http or https")
    if not parts.hostname:
        raise UrlRefused(f"{url!r}: the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused(f"{url!r}: credentials in the URL are not allowed")
    if parts.query or parts.fragment or "#" in url or "?" in url:
        raise UrlRefused(f"{url!r}: a query or fragment is not allowed")
    return parts.hostname.rstrip("."), port or (443 if parts.scheme == "https" else 80)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_url(url: str, policy: NetPolicy) -> Target:
    """The checked target of `url`, or UrlRefused naming the rule it breaks."""
    host, port = parse_target(url)
    private_ok = _matches(policy.private_hosts, host, port)
    if not private_ok and not _matches(policy.allowed_hosts, host, port):
        raise UrlRefused(f"{url!r}: host {host}:{port} is not on the operator's allow-list")
    try:
        addresses = [str(ipaddress.ip_address(host))] if _is_address(host) else policy.resolve(host, port)
    except (OSError, UnicodeError) as error:
        raise UrlRefused(f"{url!r}: host {host} does not resolve") from error
    if not addresses:
        raise UrlRefused(f"{url!r}: host {host} does not resolve")
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if not private_ok and not _is_public(address):
            raise UrlRefused(
                f"{url!r}: host {host} resolves to {address}, a loopback, private, link-local or reserved address"
            )
    return Target(host, port, tuple(addresses))


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that checks every request's URL against the policy and connects to the address it
    checked (the Host header and TLS name stay the host's)."""

    def __init__(self, policy: NetPolicy, inner: httpx.BaseTransport | None = None) -> None:
        self.policy = policy
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            target = check_url(str(request.url.copy_with(query=None, fragment=None)), self.policy)
        except UrlRefused as error:
            raise httpx.ConnectError(f"refused by the network policy: {error}", request=request) from None
        request.headers.setdefault("Host", request.url.netloc.decode("ascii"))
        if request.url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": target.host}
        request.url = request.url.copy_with(host=target.addresses[0])
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def guarded_client(policy: NetPolicy | None, **kwargs: Any) -> httpx.Client:
    """An httpx client that never follows redirects and, with a policy, checks and pins every request."""
    transport = GuardedTransport(policy) if policy is not None else None
    return httpx.Client(transport=transport, follow_redirects=False, **kwargs)


def transport_error(error: Exception) -> str:
    """What may be said of a failed connection: the local reason for connect errors and timeouts (a refusal by
    this policy included), only the error's kind otherwise (protocol errors can quote what the server sent)."""
    if isinstance(error, httpx.ConnectError | httpx.TimeoutException) and str(error):
        return f"{type(error).__name__}: {error}"
    return type(error).__name__
