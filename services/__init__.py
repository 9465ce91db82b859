"""What tenants and operators ask for, checked and turned into rows and flow intents.

The API and the CLI call these services; a service validates a request against
the database, writes its rows and the intent to run its flow in one
transaction, and hands the flow to the engine (docs/architecture.md).
"""
