"""The SSRF guard of the HTTP adapter: what http steps may reach, in every spelling."""

from __future__ import annotations

import ipaddress

import pytest
from yarl import URL

from orbit_services.http_adapter.guard import (
    HTTP_DESTINATION_FORBIDDEN,
    HTTP_INVALID_URL,
    DestinationForbidden,
    HttpGuard,
    HttpStepError,
    forbidden_reason,
    safe_url,
)
from orbit_services.runtime.addresses import AllowList, parse_ip_literal, parse_ipv4_literal
from orbit_services.runtime.settings import SettingsError, load_settings

GUARD = HttpGuard()

FORBIDDEN = [
    # (url, words of the reason)
    ("http://127.0.0.1/", "loopback"),
    ("http://127.255.0.9:8080/x", "loopback"),
    ("http://2130706433/", "loopback"),  # decimal
    ("http://017700000001/", "loopback"),  # octal, one part
    ("http://0177.0.0.1/", "loopback"),  # octal part
    ("http://0x7f.1/", "loopback"),  # hex, short form
    ("http://0X7F000001/", "loopback"),  # hex, one part
    ("http://127.1/", "loopback"),  # short form
    ("http://127.0.1/", "loopback"),
    ("http://127.0.0.1./", "loopback"),  # trailing dot
    ("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", "loopback"),  # fullwidth digits
    ("http://[::1]/", "loopback"),
    ("http://[0:0:0:0:0:0:0:1]:81/", "loopback"),
    ("http://localhost/", "this machine"),
    ("http://LOCALHOST./", "this machine"),
    ("http://api.localhost/", "this machine"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://10.0.0.1/", "private"),
    ("http://172.16.5.4/", "private"),
    ("http://172.31.255.255/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://012.0.0.1/", "private"),  # octal 012 = 10
    ("http://0xa9.254.169.254/", "metadata"),  # 169.254.169.254 in hex
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://metadata.google.internal/", "metadata"),
    ("http://169.254.1.1/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[fe80::1%25eth0]/", "zone id"),
    ("http://100.64.0.1/", "CGNAT"),
    ("http://100.127.255.254/", "CGNAT"),
    ("http://224.0.0.251/", "multicast"),
    ("http://239.1.2.3/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://255.255.255.255/", "broadcast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://192.0.2.10/", "documentation"),
    ("http://198.18.0.1/", "benchmarking"),
    ("http://[fc00::1]/", "unique local"),
    ("http://[fd12:3456::1]/", "unique local"),
    ("http://[fec0::1]/", "site-local"),
    ("http://[::ffff:127.0.0.1]/", "IPv4-mapped IPv6 address of 127.0.0.1, which is a loopback"),
    ("http://[::ffff:7f00:1]/", "IPv4-mapped"),
    ("http://[::ffff:169.254.169.254]/", "metadata"),
    ("http://[::ffff:0:10.0.0.1]/", "IPv4-translated"),
    ("http://[::127.0.0.1]/", "IPv4-compatible"),
    ("http://[::8.8.8.8]/", "IPv4-compatible"),  # deprecated: refused whatever it carries
    ("http://[64:ff9b::10.0.0.1]/", "NAT64 address of 10.0.0.1, which is a private"),
    ("http://[64:ff9b::7f00:1]/", "NAT64"),
    ("http://[64:ff9b:1::1]/", "local-use NAT64"),
    ("http://[2002:c0a8:101::1]/", "6to4 address of 192.168.1.1"),
    ("http://[2002:7f00:1::]/", "6to4"),
    ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "Teredo"),
    ("http://[2001:db8::1]/", "documentation"),
    ("http://[100::1]/", "discard-only"),
]


@pytest.mark.parametrize(("url", "words"), FORBIDDEN)
def test_forbidden_destinations_are_refused_with_the_reason(url: str, words: str) -> None:
    with pytest.raises(DestinationForbidden) as refused:
        GUARD.check_url(url)
    error = refused.value
    assert error.code == HTTP_DESTINATION_FORBIDDEN
    assert error.retryable is False
    assert words in error.message
    assert error.host in error.message
    assert isinstance(error.details, dict)
    assert error.details["host"] == error.host


def test_the_table_covers_enough_forms() -> None:
    assert len(FORBIDDEN) >= 20


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/hooks?token=1",
        "http://api.example.org:8443/",
        "https://8.8.8.8/",
        "http://1.1.1.1/",
        "http://134744072/",  # 8.8.8.8 in decimal: the spelling is not the problem
        "http://[2606:4700:4700::1111]/",
        "http://[::ffff:8.8.8.8]/",  # mapped, but a public address
        "http://[64:ff9b::8.8.8.8]/",  # NAT64 of a public address
        "http://[2002:0808:0808::1]/",  # 6to4 of a public address
        "http://172.32.0.1/",  # just outside 172.16/12
        "http://100.128.0.1/",  # just outside 100.64/10
        "http://shop.test/hook",  # a name: judged by its addresses when resolved
    ],
)
def test_public_destinations_pass(url: str) -> None:
    destination = GUARD.check_url(url)
    assert destination.trusted is False
    assert destination.url == URL(url)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://example.com/", "only http:// and https://"),
        ("file:///etc/passwd", "only http:// and https://"),
        ("gopher://example.com:70/", "only http:// and https://"),
        ("//example.com/x", "not an absolute"),
        ("/relative", "not an absolute"),
        ("http:///path", "has no host"),
    ],
)
def test_only_absolute_http_urls_with_a_host_are_accepted(url: str, words: str) -> None:
    with pytest.raises(HttpStepError) as refused:
        GUARD.check_url(url)
    assert refused.value.code == HTTP_INVALID_URL
    assert refused.value.retryable is False
    assert words in refused.value.message


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1.256", "10.1.1.0"),  # the last part fills two bytes
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),
        ("1.2.3.4.", "1.2.3.4"),
    ],
)
def test_ipv4_literals_are_read_as_the_c_resolver_reads_them(text: str, address: str) -> None:
    assert parse_ipv4_literal(text) == ipaddress.IPv4Address(address)


@pytest.mark.parametrize(
    "text", ["256.0.0.1", "1.2.3.4.5", "08.0.0.1", "1.2.3.256", "1.16777216", "a.b", "1..2", ""]
)
def test_names_that_look_numeric_are_not_literals(text: str) -> None:
    assert parse_ipv4_literal(text) is None


def test_ipv6_literals_keep_their_zone() -> None:
    assert parse_ip_literal("[fe80::1%25eth0]") == (ipaddress.IPv6Address("fe80::1"), "eth0")
    assert parse_ip_literal("::1") == (ipaddress.IPv6Address("::1"), None)
    assert parse_ip_literal("example.com") is None


def test_public_addresses_have_no_reason() -> None:
    for text in ("8.8.8.8", "93.184.216.34", "2606:4700::1111", "2a00:1450:4001::1"):
        assert forbidden_reason(ipaddress.ip_address(text)) is None


# -- resolved addresses ----------------------------------------------------------


def test_a_name_is_refused_if_any_address_it_resolves_to_is() -> None:
    destination = GUARD.check_url("http://rebind.example/")
    assert GUARD.check_resolved(destination, ["93.184.216.34"]) == [
        ipaddress.ip_address("93.184.216.34")
    ]
    with pytest.raises(DestinationForbidden) as refused:
        GUARD.check_resolved(destination, ["93.184.216.34", "10.0.0.7"])
    assert refused.value.address == "10.0.0.7"
    assert "rebind.example (10.0.0.7): a private address" in refused.value.message
    with pytest.raises(DestinationForbidden, match="resolves to no address"):
        GUARD.check_resolved(destination, [])


def test_a_resolved_mapped_address_is_judged_by_its_ipv4_address() -> None:
    with pytest.raises(DestinationForbidden, match="IPv4-mapped"):
        GUARD.check_resolved("evil.example", ["::ffff:192.168.0.1"])


# -- the allow-list --------------------------------------------------------------


def test_allowed_networks_let_their_addresses_through() -> None:
    guard = HttpGuard(AllowList.parse(["127.0.0.1", "10.1.0.0/16", "[::1]"]))
    assert guard.check_url("http://127.0.0.1:8080/").address == ipaddress.ip_address("127.0.0.1")
    guard.check_url("http://2130706433/")  # the same address, in another spelling
    guard.check_url("http://[::ffff:127.0.0.1]/")  # and mapped
    guard.check_url("http://[::1]/")
    guard.check_resolved("svc.internal", ["10.1.2.3"])
    for still_refused in ("http://127.0.0.2/", "http://10.2.0.1/", "http://169.254.169.254/"):
        with pytest.raises(DestinationForbidden):
            guard.check_url(still_refused)
    with pytest.raises(DestinationForbidden):
        guard.check_resolved("svc.internal", ["10.1.2.3", "10.2.0.1"])


def test_allowed_names_are_trusted_whatever_they_resolve_to() -> None:
    guard = HttpGuard(AllowList.parse(["localhost", "*.corp.example", "API.Internal."]))
    assert guard.check_url("http://localhost:9000/").trusted is True
    assert guard.check_url("http://billing.corp.example/").trusted is True
    assert guard.check_url("http://a.b.corp.example/").trusted is True
    assert guard.check_url("http://api.internal/").trusted is True
    assert guard.check_resolved("api.internal", ["10.9.9.9", "127.0.0.1"]) == [
        ipaddress.ip_address("10.9.9.9"),
        ipaddress.ip_address("127.0.0.1"),
    ]
    # The suffix is a subdomain rule, not a string match; other names stay judged.
    assert guard.check_url("http://corp.example/").trusted is False
    assert guard.check_url("http://evilcorp.example/").trusted is False
    with pytest.raises(DestinationForbidden):
        guard.check_resolved("evilcorp.example", ["10.9.9.9"])
    # A name does not allow an address literal.
    with pytest.raises(DestinationForbidden):
        guard.check_url("http://127.0.0.1/")


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("10.0.0.1/8", "has host bits set"),
        ("300.1.2.3/8", "not a network"),
        ("exa mple.com", "neither a host name"),
        ("http://example.com", "neither a host name"),
        ("[fe80::1%25eth0]", "zone id"),
    ],
)
def test_a_bad_allow_list_entry_is_named(entry: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as error:
        AllowList.parse([entry])
    assert entry in str(error.value)


def test_the_setting_is_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBIT_HTTP_ALLOW_HOSTS", " 127.0.0.1, api.internal ,,10.0.0.0/8")
    settings = load_settings()
    assert settings.http_allow_hosts == ("127.0.0.1", "api.internal", "10.0.0.0/8")
    assert settings.http_allow_list.allows_name("api.internal")
    monkeypatch.setenv("ORBIT_HTTP_ALLOW_HOSTS", "")
    assert load_settings().http_allow_hosts == ()
    assert not load_settings().http_allow_list
    monkeypatch.setenv("ORBIT_HTTP_ALLOW_HOSTS", "10.0.0.1/8")
    with pytest.raises(
        SettingsError, match=r"ORBIT_HTTP_ALLOW_HOSTS: '10.0.0.1/8' is not a network"
    ):
        load_settings()


def test_the_adapter_settings_have_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ALLOW_HOSTS", "MAX_RESPONSE_BYTES", "MAX_REDIRECTS", "DEFAULT_TIMEOUT_MS"):
        monkeypatch.delenv(f"ORBIT_HTTP_{name}", raising=False)
    monkeypatch.delenv("ORBIT_HTTP_ADAPTER_CONCURRENCY", raising=False)
    settings = load_settings()
    assert settings.http_allow_hosts == ()
    assert settings.http_max_response_bytes == 1_048_576
    assert settings.http_max_redirects == 10
    assert settings.http_default_timeout_ms == 30_000
    assert settings.http_adapter_concurrency == 64


def test_messages_leave_secrets_out_of_urls() -> None:
    url = URL("https://user:secret@example.com/hook?token=abc#frag")
    assert safe_url(url) == "https://example.com/hook"
