"""What the app makes when first used (its OpenAPI document, its URL builders) is
what flask-smorest and werkzeug make when the app is built."""

from __future__ import annotations

import json

import flask
import flask_smorest
from werkzeug import routing

from fleetflow.api import app as app_module


class EagerApi(app_module.Api):
    """flask-smorest's own registration: each blueprint documented as it is registered."""

    register_blueprint = flask_smorest.Api.register_blueprint

    def defer_document(self, step) -> None:
        step()


def _document(conf, db, api_services) -> str:
    app = app_module.create_app(conf, database=db, services=api_services)
    return json.dumps(app.test_client().get("/openapi.json").get_json(), sort_keys=False)


def test_the_document_written_when_first_read_is_flask_smorests(conf, db, api_services,
                                                                 monkeypatch):
    lazy = _document(conf, db, api_services)
    monkeypatch.setattr(app_module, "Api", EagerApi)
    eager = _document(conf, db, api_services)
    assert json.loads(lazy)["paths"], "the document lists the routes"
    assert lazy == eager


def test_urls_built_by_the_lazy_builders_are_werkzeugs(conf, db, api_services):
    app = app_module.create_app(conf, database=db, services=api_services)
    stock = routing.Map([routing.Rule(rule.rule, endpoint=rule.endpoint,
                                      methods=rule.methods)
                         for rule in app.url_map.iter_rules()])
    lazy_adapter = app.url_map.bind("cloud.example", url_scheme="https")
    stock_adapter = stock.bind("cloud.example", url_scheme="https")
    built = 0
    for rule in app.url_map.iter_rules():
        values = {name: f"v-{name}" for name in rule.arguments}
        for extra in ({}, {"limit": "5", "marker": "m 1"}):
            method = next(iter(rule.methods - {"HEAD", "OPTIONS"}), None)
            assert (lazy_adapter.build(rule.endpoint, {**values, **extra}, method=method)
                    == stock_adapter.build(rule.endpoint, {**values, **extra}, method=method))
            built += 1
    assert built > 100
    assert isinstance(next(app.url_map.iter_rules()), app_module.Rule)
    assert flask.Flask.url_rule_class is routing.Rule
