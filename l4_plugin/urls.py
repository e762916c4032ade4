"""URLs as L4 shows and checks them: credentials redacted before anything is printed.

A floor of the package (it imports only ``errors``): the settings, the store and the dashboards
installer all use it without importing each other.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

from l4_plugin.errors import ConfigError


def redact_url(url: str) -> str:
    """The URL with any ``user:password@`` replaced by ``***@`` (``https://***@host``).

    Works on the text, so a URL that does not parse (``http://user:pw@[::1``) or has another
    scheme (``ftp://user:pw@host``) is redacted too: everything between ``//`` and the last
    ``@`` is taken for credentials.
    """
    head, sep, rest = url.partition("//")
    if not sep:
        at = url.rfind("@")
        return url if at < 0 else f"***@{url[at + 1 :]}"
    at = rest.rfind("@")
    return url if at < 0 else f"{head}//***@{rest[at + 1 :]}"


def url_problem(url: str, schemes: tuple[str, ...] = ("http", "https")) -> str | None:
    """Why ``url`` is not a usable ``scheme://host[:port]`` URL (None when it is); the reason
    never repeats the URL."""
    if "//" not in url:
        return f"it does not start with {' or '.join(f'{s}://' for s in schemes)}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        reason = str(exc).split(":")[0]  # "Port could not be cast to integer value as 'x'"
        if "port" in reason.lower():
            return "the port is not a number from 0 to 65535"
        return f"it does not parse ({reason})"
    if parts.scheme.lower() not in schemes:
        shown = f"{parts.scheme}://" if parts.scheme else "no scheme"
        return f"{shown} is not supported — use {' or '.join(f'{s}://' for s in schemes)}"
    if not parts.hostname:
        return "it has no host"
    del port
    return None


def split_credentials(url: str, what: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and that user and password (or None).

    A URL that is not ``http(s)://host[:port]`` is a ``ConfigError`` naming ``what`` and the
    redacted URL.
    """
    problem = url_problem(url)
    if problem is not None:
        raise ConfigError(
            f"invalid {what} — {redact_url(url)!r} — {problem} — hint: e.g. https://kibana.example:5601"
        )
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return bare, user, password
