"""The token matrix's table itself: its rows are exactly the routes each listener serves (the
API's as ``docs/openapi.yaml`` documents them, the bridge's and the Web UI's as their Flask
blueprints add them), and ``docs/security.md`` shows it as ``token_matrix.render()`` does."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from flask import Flask

from tests.security.token_matrix import (
    API,
    BRIDGE,
    DOC,
    END,
    MATRIX,
    REGENERATE,
    START,
    WEBUI,
    documented,
    render,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_api_rows_are_the_routes_of_the_openapi_document() -> None:
    document = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    methods = {"get", "put", "post", "delete", "patch"}
    documented_routes = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in methods
    }
    assert served_routes(API) == documented_routes


def test_the_bridge_rows_are_the_routes_the_bridge_serves() -> None:
    from iris_runtime.web.bridge_app import blueprint

    assert served_routes(BRIDGE) == flask_routes(blueprint)


# Web UI routes that need no sign-in: the pages to sign in with, and static files.
PUBLIC_WEBUI_ROUTES = {
    ("GET", "/login"),
    ("POST", "/login"),
    ("GET", "/login/options"),
    ("POST", "/logout"),
    ("GET", "/static/{filename}"),
}


def test_the_webui_rows_are_its_routes_that_need_a_sign_in() -> None:
    from iris_webui.routes import blueprint  # with every route joined

    assert served_routes(WEBUI) == flask_routes(blueprint) - PUBLIC_WEBUI_ROUTES


def served_routes(listener: str) -> set[tuple[str, str]]:
    return {(r.method, r.path) for r in MATRIX if r.listener == listener and r.served}


def flask_routes(blueprint: Any) -> set[tuple[str, str]]:
    """``(method, path)`` of every rule a blueprint adds, written as the table writes them."""
    app = Flask("token-matrix")
    app.register_blueprint(blueprint)
    return {
        (method, re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule))
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"  # the bare app's own, not the blueprint's
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})
    }


def test_docs_security_md_shows_the_table() -> None:
    shown = documented(DOC.read_text(encoding="utf-8"))
    assert shown is not None, f"docs/security.md lacks the {START} … {END} markers"
    assert shown == render(), (
        "the token matrix in docs/security.md differs from tests/security/token_matrix.py; "
        f"regenerate it with `{REGENERATE}`"
    )
