"""Placement: resource providers, inventories, consumers and their allocations."""
