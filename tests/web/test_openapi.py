"""/api/openapi.json: an OpenAPI 3.1 document whose paths match the served routes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.routing import Route

from aster_forge.web import AdminSources, admin_app
from aster_forge.web._openapi import openapi_document

from ._support import AUTH, TOKEN, client


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


async def test_served_document_is_openapi_3_1_and_covers_every_route() -> None:
    app = admin_app(AdminSources(), dashboard=False)
    async with client(app) as http:
        document = (await http.get("/api/openapi.json")).json()
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] == "aster-forge admin API"
    served = {
        (re.sub(r"\{(\w+):int\}", r"{\1}", route.path), method.lower())
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    assert documented == served
    for item in document["paths"].values():
        for operation in item.values():
            assert "200" in operation["responses"] and "401" in operation["responses"]
            path_params = [p for p in operation.get("parameters", []) if p["in"] == "path"]
            assert all(p["required"] is True for p in path_params)
    schemas = document["components"]["schemas"]
    for ref in refs(document):
        assert ref.startswith("#/components/schemas/")
        assert ref.rsplit("/", 1)[1] in schemas


async def test_security_scheme_only_with_a_token() -> None:
    async with client(admin_app(AdminSources(), admin_token=TOKEN)) as http:
        document = (await http.get("/api/openapi.json", headers=AUTH)).json()
    assert document["security"] == [{"bearer": []}]
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "security" not in openapi_document("x", auth=False)


def test_documents_do_not_share_mutable_state() -> None:
    first = openapi_document("a", auth=True)
    first["components"]["schemas"]["Task"]["properties"].clear()
    assert openapi_document("a", auth=False)["components"]["schemas"]["Task"]["properties"]


def test_validates_with_openapi_spec_validator() -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(openapi_document("aster-forge", auth=True))
    validator.validate(openapi_document("aster-forge", auth=False))
