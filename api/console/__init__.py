"""The operator console: a page and its scripts, served at ``/console/``.

The console is static: one HTML page, plain JavaScript modules and a style
sheet shipped in the package (``static/``), nothing built and nothing fetched
from elsewhere. It is served without the API's authentication, as it holds no
data: the page calls the API with the identity the user gives it (noauth:
``X-Auth-Token: PROJECT:ROLE``; keystone: a token), so the API's policy
decides what each person sees, and the console only reflects it.
"""

from __future__ import annotations

import pathlib

import flask

STATIC = pathlib.Path(__file__).parent / "static"

blp = flask.Blueprint("console", __name__, static_folder=None)


@blp.route("/console")
def redirect_to_console():
    return flask.redirect(flask.url_for("console.page", **flask.request.args), code=308)


@blp.route("/console/")
def page():
    response = flask.send_from_directory(STATIC, "index.html")
    response.headers["Cache-Control"] = "no-cache"
    return response


@blp.route("/console/<path:name>")
def asset(name):
    response = flask.send_from_directory(STATIC, name)
    response.headers["Cache-Control"] = "no-cache"
    # NOTE: some systems map .js to text/plain; a module must be JavaScript.
    if name.endswith(".js"):
        response.mimetype = "text/javascript"
    return response
