"""The dashboard page and its packaged assets."""

from __future__ import annotations

import re

from aster_forge.web import AdminSources, create_app

from ._support import TOKEN, client


async def test_page_and_assets_are_served_with_a_strict_policy() -> None:
    async with client(create_app(AdminSources(), admin_token=TOKEN)) as http:
        page = await http.get("/")
        script = await http.get("/static/dashboard.js")
        style = await http.get("/static/dashboard.css")
        missing = await http.get("/static/nope.js")
    assert page.status_code == script.status_code == style.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert script.headers["content-type"].startswith("text/javascript")
    assert style.headers["content-type"].startswith("text/css")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert missing.status_code == 404


async def test_page_loads_nothing_from_elsewhere() -> None:
    async with client(create_app(AdminSources())) as http:
        page = (await http.get("/")).text
        script = (await http.get("/static/dashboard.js")).text
    assert not re.search(r"(src|href)=\"(https?:)?//", page)
    assert "<script>" not in page  # no inline script (the policy would block it)
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", script)
    assert "innerHTML" not in script  # data goes in through textContent only
    for section in ["tasks", "lanes", "scheduled", "leases", "components", "reports"]:
        assert f'id="{section}"' in page
    # The page keeps a ?token= in sessionStorage and sends it as a bearer token.
    assert "sessionStorage" in script and '"Bearer "' in script
    assert 'data-action": action' in script or "data-action" in script
