"""Where outbound webhooks may go: internal, private and cloud-metadata addresses are refused.

Destinations are checked when a subscription (or an external task's callback) is
saved and again at send time, every address the name resolves to; the sender
then connects to the address that was checked (docs/security-audit.md).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from approvals.errors import InvalidInput

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance metadata services (AWS/GCP/Azure/OpenStack, ECS task credentials, Alibaba, Azure wire
# server, AWS over IPv6): refused even when an allowlisted network contains them.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "168.63.129.16", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class DestinationRefused(Exception):
    """The URL resolves to an address outbound webhooks may not reach."""


class DestinationUnresolvable(Exception):
    pass


@dataclass(frozen=True)
class OutboundPolicy:
    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = frozenset()


def outbound_policy() -> OutboundPolicy:
    """GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS: CIDRs and host names that may be reached although internal."""
    networks: list[Network] = []
    hosts: set[str] = set()
    for entry in settings.GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            hosts.add(entry.lower().rstrip("."))
    return OutboundPolicy(tuple(networks), frozenset(hosts))


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64), which is where it leads."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


METADATA_REFUSAL = "a cloud metadata address"


def address_refusal(address: Address, *, host: str, policy: OutboundPolicy) -> str | None:
    """Why ``address`` may not be reached (None: it may)."""
    candidates = [address] + [a for a in [_embedded_ipv4(address)] if a is not None]
    if any(a in METADATA_ADDRESSES for a in candidates):
        return METADATA_REFUSAL
    if host in policy.hosts or any(a in n for a in candidates for n in policy.networks):
        return None
    for a in candidates:
        for refused, label in (
            (a.is_loopback, "loopback"),
            (a.is_link_local, "link-local"),
            (a.is_multicast, "multicast"),
            (a.is_unspecified, "unspecified"),
            (isinstance(a, ipaddress.IPv6Address) and a.is_site_local, "site-local"),
            (a.is_private, "private"),
            (a.is_reserved, "reserved"),
            (not a.is_global, "not publicly routable"),
        ):
            if refused:
                return label
    return None


def url_parts(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, or InvalidInput naming ``url``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"the url is not valid: {exc}", field="url") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidInput("the url must be http(s)", field="url")
    if not parts.hostname:
        raise InvalidInput("the url has no host", field="url")
    return parts.scheme, parts.hostname.lower().rstrip("."), port or (443 if parts.scheme == "https" else 80)


def destination_resolve(url: str, *, policy: OutboundPolicy | None = None) -> list[Address]:
    """Every address ``url``'s host resolves to, each one checked; DestinationRefused if any may not be reached.

    Checking every address (not only the first) matters: a name with one public
    and one internal address would otherwise reach the internal one on a retry.
    """
    policy = policy or outbound_policy()
    _, host, port = url_parts(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise DestinationUnresolvable(f"{host} does not resolve: {exc}") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not addresses:
        raise DestinationUnresolvable(f"{host} does not resolve")
    for address in addresses:
        reason = address_refusal(address, host=host, policy=policy)
        if reason == METADATA_REFUSAL:
            # No allowlist opens these (the credentials of the host's cloud identity): do not suggest one.
            raise DestinationRefused(
                f"{host} resolves to {address} ({reason}); outbound webhooks never reach cloud metadata "
                "addresses, whatever GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS says"
            )
        if reason is not None:
            raise DestinationRefused(
                f"{host} resolves to {address} ({reason}); outbound webhooks may not reach it "
                "unless GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS allows it"
            )
    return addresses


def destination_check(url: str) -> None:
    """For a subscription being saved: InvalidInput naming ``url`` unless it is a reachable public address."""
    try:
        destination_resolve(url)
    except (DestinationRefused, DestinationUnresolvable) as exc:
        raise InvalidInput(str(exc), field="url") from None
