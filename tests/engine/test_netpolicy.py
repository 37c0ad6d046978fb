"""The URL policy: http(s) only, hosts on the allow-list, no loopback, private, link-local or reserved address
(checked after DNS resolution) unless the operator allowed that host, and an httpx transport that checks and pins
every request, redirects included."""

from __future__ import annotations

import httpx
import pytest
from pytest_httpserver import HTTPServer

from inspo_engine.netpolicy import GuardedTransport, NetPolicy, UrlRefused, check_url, guarded_client


def resolver(table: dict[str, list[str]]):
    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError(f"unknown host {host}")
        return table[host]

    return resolve


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://files.example.org/x", "gopher://example.org/", "example.org:80/v1", "//example.org/"],
)
def test_only_http_and_https_urls_pass(url: str) -> None:
    with pytest.raises(UrlRefused):
        check_url(url, NetPolicy(allowed_hosts=("example.org",)))


def test_a_host_off_the_allow_list_is_refused_before_it_is_resolved() -> None:
    looked_up: list[str] = []
    policy = NetPolicy(allowed_hosts=("search.example.org",), resolve=lambda h, p: looked_up.append(h) or [])
    with pytest.raises(UrlRefused, match="allow-list"):
        check_url("https://other.example.org/retrieve", policy)
    assert looked_up == []


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "fe80::1",
     "fc00::1", "::ffff:127.0.0.1", "224.0.0.1"],
)  # fmt: skip
def test_loopback_private_link_local_and_reserved_addresses_are_refused_even_on_the_allow_list(address: str) -> None:
    host = f"[{address}]" if ":" in address else address
    policy = NetPolicy(allowed_hosts=(address, "metadata.example.org"))
    with pytest.raises(UrlRefused, match="loopback, private, link-local or reserved"):
        check_url(f"http://{host}:8000/retrieve", policy)
    by_name = NetPolicy(allowed_hosts=("metadata.example.org",), resolve=resolver({"metadata.example.org": [address]}))
    with pytest.raises(UrlRefused, match="resolves to"):
        check_url("http://metadata.example.org/latest", by_name)


def test_a_name_is_refused_when_any_of_its_addresses_is_private() -> None:
    policy = NetPolicy(
        allowed_hosts=("api.example.org",), resolve=resolver({"api.example.org": ["93.184.216.34", "10.0.0.7"]})
    )
    with pytest.raises(UrlRefused, match=r"10\.0\.0\.7"):
        check_url("https://api.example.org/v1", policy)


def test_a_public_allowed_host_passes_with_its_addresses() -> None:
    policy = NetPolicy(allowed_hosts=("*.example.org",), resolve=resolver({"llm.example.org": ["93.184.216.34"]}))
    target = check_url("https://llm.example.org/v1", policy)
    assert (target.host, target.port, target.addresses) == ("llm.example.org", 443, ("93.184.216.34",))
    with pytest.raises(UrlRefused, match="allow-list"):
        check_url("https://example.org/v1", policy)  # the wildcard names subdomains only


def test_the_operator_may_allow_one_private_host_and_port_explicitly() -> None:
    policy = NetPolicy(
        private_hosts=("127.0.0.1:8123", "vllm.internal"), resolve=resolver({"vllm.internal": ["10.1.2.3"]})
    )
    assert check_url("http://127.0.0.1:8123/retrieve", policy).addresses == ("127.0.0.1",)
    assert check_url("http://vllm.internal:8000/v1", policy).addresses == ("10.1.2.3",)
    with pytest.raises(UrlRefused):
        check_url("http://127.0.0.1:8124/retrieve", policy)  # another port of the same host
    with pytest.raises(UrlRefused):
        check_url("http://10.0.0.1/", policy)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8123/v1#", "http://127.0.0.1:8123/v1?x=/chat", "http://user:pw@127.0.0.1:8123/v1"],
)
def test_fragments_queries_and_credentials_are_refused(url: str) -> None:
    """A trailing '#' or '?' would swallow the path a client appends; credentials would travel to the host."""
    with pytest.raises(UrlRefused):
        check_url(url, NetPolicy(private_hosts=("127.0.0.1:8123",)))


def test_a_host_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(UrlRefused, match="does not resolve"):
        check_url(
            "http://nowhere.example.org/", NetPolicy(allowed_hosts=("nowhere.example.org",), resolve=resolver({}))
        )


def test_the_transport_connects_to_the_address_it_checked_keeping_the_host_header(httpserver: HTTPServer) -> None:
    """A name that resolves to an allowed address is reached at that address, so a later DNS answer cannot
    redirect the connection elsewhere."""
    httpserver.expect_request("/v1/ping").respond_with_json({"ok": True})
    host = f"llm.internal:{httpserver.port}"
    policy = NetPolicy(private_hosts=(host,), resolve=resolver({"llm.internal": ["127.0.0.1"]}))
    with guarded_client(policy) as client:
        assert client.get(f"http://{host}/v1/ping").json() == {"ok": True}
    (request, _), *_ = httpserver.log
    assert request.headers["Host"] == host


def test_every_request_is_checked_so_a_redirect_to_a_private_address_is_refused(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat").respond_with_data("", status=302, headers={"Location": "http://10.0.0.1/"})
    policy = NetPolicy(private_hosts=(f"localhost:{httpserver.port}",))
    with guarded_client(policy) as client:
        assert client.post(httpserver.url_for("/v1/chat")).status_code == 302  # never followed by itself
    following = httpx.Client(transport=GuardedTransport(policy), follow_redirects=True)
    with following, pytest.raises(httpx.ConnectError, match="network policy"):
        following.post(httpserver.url_for("/v1/chat"))
