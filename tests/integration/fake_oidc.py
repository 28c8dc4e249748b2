"""A small OpenID Connect provider for tests: the outside world, behaving like the real thing.

A real HTTP server (a thread) with discovery, authorize (auto-consent: it signs in whoever the test
put in ``login_as``), token (authorization code grant, client secret, single-use codes bound to their
redirect URI, PKCE S256), JWKS (an RSA key generated per run) and userinfo (bearer access token).
ID tokens are RS256 JWTs with iss, sub, aud, exp, iat, nonce. ``tamper`` lets a test make the
provider misbehave (another audience, another issuer, a foreign signing key) to see the client refuse.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Grant:
    claims: dict[str, Any]
    client_id: str
    redirect_uri: str
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    issued_at: float = field(default_factory=time.time)


class FakeOidcProvider:
    def __init__(self, *, client_id: str, client_secret: str) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.redirect_uris: set[str] = set()
        self.key = _key()
        self.kid = uuid.uuid4().hex[:12]
        self.login_as: dict[str, Any] | None = None  # the person who "signs in" at the next authorize
        self.tamper: dict[str, Any] = {}  # "aud", "iss", "foreign_key", "userinfo_sub"
        self.requests: list[str] = []
        self._codes: dict[str, Grant] = {}
        self._tokens: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeOidcProvider:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- the protocol ----------------------------------------------------------------------------

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": ["openid", "email", "profile"],
        }

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if query.get("client_id") != self.client_id:
            return 400, {}, b"unknown client_id"
        redirect_uri = query.get("redirect_uri", "")
        if redirect_uri not in self.redirect_uris:
            return 400, {}, b"redirect_uri is not registered for this client"
        state = query.get("state", "")
        if query.get("response_type") != "code" or "openid" not in query.get("scope", "").split():
            return 302, {"Location": f"{redirect_uri}?{urlencode({'error': 'invalid_request', 'state': state})}"}, b""
        if self.login_as is None:
            return 302, {"Location": f"{redirect_uri}?{urlencode({'error': 'access_denied', 'state': state})}"}, b""
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._codes[code] = Grant(
                claims=dict(self.login_as),
                client_id=self.client_id,
                redirect_uri=redirect_uri,
                nonce=query.get("nonce"),
                code_challenge=query.get("code_challenge"),
                code_challenge_method=query.get("code_challenge_method"),
            )
        return 302, {"Location": f"{redirect_uri}?{urlencode({'code': code, 'state': state})}"}, b""

    def token(self, form: dict[str, str], authorization: str) -> tuple[int, dict[str, Any]]:
        client_id, client_secret = form.get("client_id", ""), form.get("client_secret", "")
        if authorization.startswith("Basic "):
            client_id, _, client_secret = base64.b64decode(authorization[6:]).decode().partition(":")
        if client_id != self.client_id or not secrets.compare_digest(client_secret, self.client_secret):
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "authorization_code":
            return 400, {"error": "unsupported_grant_type"}
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)  # single use
        if grant is None or time.time() - grant.issued_at > 60 or grant.redirect_uri != form.get("redirect_uri"):
            return 400, {"error": "invalid_grant"}
        if grant.code_challenge:
            verifier = form.get("code_verifier", "")
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if grant.code_challenge_method != "S256" or digest != grant.code_challenge:
                return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
        now = int(time.time())
        id_claims = {
            "iss": self.tamper.get("iss", self.issuer),
            "sub": grant.claims["sub"],
            "aud": self.tamper.get("aud", self.client_id),
            "iat": now,
            "exp": now + 300,
            "auth_time": now,
            **({"nonce": grant.nonce} if grant.nonce else {}),
            **{k: v for k, v in grant.claims.items() if k != "sub"},
        }
        key = _key() if self.tamper.get("foreign_key") else self.key
        id_token = jwt.encode(id_claims, key, algorithm="RS256", headers={"kid": self.kid})
        access_token = secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[access_token] = dict(grant.claims)
        return 200, {"access_token": access_token, "token_type": "Bearer", "expires_in": 300, "id_token": id_token}

    def userinfo(self, authorization: str) -> tuple[int, dict[str, Any]]:
        claims = self._tokens.get(authorization.removeprefix("Bearer ").strip()) if authorization else None
        if claims is None:
            return 401, {"error": "invalid_token"}
        if "userinfo_sub" in self.tamper:
            claims = {**claims, "sub": self.tamper["userinfo_sub"]}
        return 200, claims

    # --- HTTP ----------------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if not isinstance(body, bytes) else "text/plain")
                self.send_header("Cache-Control", "no-store")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                provider.requests.append(f"GET {url.path}")
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/.well-known/openid-configuration":
                    self._send(200, provider.discovery())
                elif url.path == "/jwks":
                    self._send(200, provider.jwks())
                elif url.path == "/authorize":
                    status, headers, body = provider.authorize(query)
                    self._send(status, body, headers)
                elif url.path == "/userinfo":
                    status, claims = provider.userinfo(self.headers.get("Authorization", ""))
                    self._send(status, claims)
                else:
                    self._send(404, {"error": "not_found"})

            def do_POST(self) -> None:
                url = urlparse(self.path)
                provider.requests.append(f"POST {url.path}")
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if url.path == "/token":
                    status, body = provider.token(form, self.headers.get("Authorization", ""))
                    self._send(status, body)
                else:
                    self._send(404, {"error": "not_found"})

        return Handler
