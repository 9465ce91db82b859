"""The fleetflow REST API (Flask + flask-smorest).

Map: ``app.create_app`` (factory and the list of blueprints; its docstring
says how to add a resource), ``errors`` (the one error format), ``auth``
(noauth / keystone, the request context), ``policy`` (oslo.policy rules),
``common`` (Blueprint, pagination), ``state`` (per-app conf, database,
services), ``client`` (Python client for the CLI), one package per resource.
"""
