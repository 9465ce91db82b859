"""OpenStack Placement's policy rules, by Placement's names, defaults and scope types.

A deployment can use the policy file it has for Placement: the same rule names
mean the same thing here. Every rule is project-scoped, as in Placement: a
system-scoped token (``OpenStack-System-Scope: all``) passes none of them.

The base rules say who is who; each route rule names one of them:

    admin_api                               role:admin
    service_api                             role:service
    admin_or_service_api                    role:admin or role:service
    project_reader_api                      role:reader and project_id:%(project_id)s
    admin_or_project_reader_or_service_api  role:admin or rule:project_reader_api
                                            or role:service

``[oslo_policy] enforce_new_defaults`` chooses between these defaults and the
deprecated ones: with it false, every rule but ``admin_api`` also lets an
administrator (``role:admin``) through, so an admin may reshape and read any
project's usages, as before Placement's secure defaults. Each route rule also
stands in for fleetflow's earlier ``placement:read`` (GET) or ``placement:write``
(other methods) rule: a policy file that still overrides one of those and not
the new name keeps working (oslo.policy logs that the name is deprecated).
"""

from __future__ import annotations

from oslo_policy import policy as oslo_policy

ADMIN_API = "rule:admin_api"
SERVICE = "rule:service_api"
ADMIN_OR_SERVICE = "rule:admin_or_service_api"
ADMIN_OR_PROJECT_READER_OR_SERVICE = "rule:admin_or_project_reader_or_service_api"

_SECURE_DEFAULTS = ("Placement's rules now tell admins, services and project readers "
                    "apart, each in project scope")
_LEGACY_ADMIN = oslo_policy.DeprecatedRule(
    "admin_api", "role:admin", deprecated_reason=_SECURE_DEFAULTS, deprecated_since="W")
_PER_ROUTE = ("One rule per route, with Placement's names, instead of one rule for all "
              "reads and one for all writes")

PROJECT = ["project"]

BASE_RULES = [
    oslo_policy.RuleDefault("admin_api", "role:admin",
                            "An administrator: the default of most placement routes.",
                            scope_types=PROJECT),
    oslo_policy.RuleDefault("service_api", "role:service",
                            "Another OpenStack service (Nova, Neutron ...).",
                            scope_types=PROJECT, deprecated_rule=_LEGACY_ADMIN),
    oslo_policy.RuleDefault("admin_or_service_api", "role:admin or role:service",
                            "An administrator or a service.",
                            scope_types=PROJECT, deprecated_rule=_LEGACY_ADMIN),
    oslo_policy.RuleDefault("project_reader_api",
                            "role:reader and project_id:%(project_id)s",
                            "A reader of the project the request is about.",
                            deprecated_rule=_LEGACY_ADMIN),
    oslo_policy.RuleDefault("admin_or_project_reader_or_service_api",
                            "role:admin or rule:project_reader_api or role:service",
                            "An administrator, a service, or a reader of the project the "
                            "request is about.",
                            scope_types=PROJECT, deprecated_rule=_LEGACY_ADMIN),
]

RP = "/resource_providers"
RP_ONE = RP + "/{uuid}"
INVENTORIES = RP_ONE + "/inventories"
INVENTORY = INVENTORIES + "/{resource_class}"

# (rule name, check, [(method, path) ...], description).
ROUTE_RULES = [
    ("placement:resource_providers:list", ADMIN_OR_SERVICE, [("GET", RP)],
     "List resource providers."),
    ("placement:resource_providers:create", ADMIN_OR_SERVICE, [("POST", RP)],
     "Create a resource provider."),
    ("placement:resource_providers:show", ADMIN_OR_SERVICE, [("GET", RP_ONE)],
     "Show a resource provider."),
    ("placement:resource_providers:update", ADMIN_OR_SERVICE, [("PUT", RP_ONE)],
     "Rename a resource provider or change its parent."),
    ("placement:resource_providers:delete", ADMIN_OR_SERVICE, [("DELETE", RP_ONE)],
     "Delete a resource provider."),
    ("placement:resource_classes:list", ADMIN_OR_SERVICE, [("GET", "/resource_classes")],
     "List resource classes."),
    ("placement:resource_classes:create", ADMIN_OR_SERVICE, [("POST", "/resource_classes")],
     "Create a custom resource class."),
    ("placement:resource_classes:show", ADMIN_OR_SERVICE,
     [("GET", "/resource_classes/{name}")], "Show a resource class."),
    ("placement:resource_classes:update", ADMIN_OR_SERVICE,
     [("PUT", "/resource_classes/{name}")], "Create or rename a custom resource class."),
    ("placement:resource_classes:delete", ADMIN_OR_SERVICE,
     [("DELETE", "/resource_classes/{name}")], "Delete a custom resource class."),
    ("placement:resource_providers:inventories:list", ADMIN_OR_SERVICE,
     [("GET", INVENTORIES)], "List a provider's inventories."),
    ("placement:resource_providers:inventories:create", ADMIN_OR_SERVICE,
     [("POST", INVENTORIES)], "Add one inventory to a provider."),
    ("placement:resource_providers:inventories:show", ADMIN_OR_SERVICE,
     [("GET", INVENTORY)], "Show one inventory of a provider."),
    ("placement:resource_providers:inventories:update", ADMIN_OR_SERVICE,
     [("PUT", INVENTORIES), ("PUT", INVENTORY)], "Replace a provider's inventories, or one."),
    ("placement:resource_providers:inventories:delete", ADMIN_OR_SERVICE,
     [("DELETE", INVENTORIES), ("DELETE", INVENTORY)],
     "Delete a provider's inventories, or one."),
    ("placement:resource_providers:aggregates:list", ADMIN_OR_SERVICE,
     [("GET", RP_ONE + "/aggregates")], "List a provider's aggregates."),
    ("placement:resource_providers:aggregates:update", ADMIN_OR_SERVICE,
     [("PUT", RP_ONE + "/aggregates")], "Replace a provider's aggregates."),
    ("placement:resource_providers:usages", ADMIN_OR_SERVICE, [("GET", RP_ONE + "/usages")],
     "Show a provider's usages."),
    ("placement:usages", ADMIN_OR_PROJECT_READER_OR_SERVICE, [("GET", "/usages")],
     "Show a project's total usages: administrators and services any project's, the "
     "project's readers (and members) their own."),
    ("placement:traits:list", ADMIN_OR_SERVICE, [("GET", "/traits")], "List traits."),
    ("placement:traits:show", ADMIN_OR_SERVICE, [("GET", "/traits/{name}")],
     "Say whether a trait exists."),
    ("placement:traits:update", ADMIN_OR_SERVICE, [("PUT", "/traits/{name}")],
     "Create a custom trait."),
    ("placement:traits:delete", ADMIN_OR_SERVICE, [("DELETE", "/traits/{name}")],
     "Delete a custom trait."),
    ("placement:resource_providers:traits:list", ADMIN_OR_SERVICE,
     [("GET", RP_ONE + "/traits")], "List a provider's traits."),
    ("placement:resource_providers:traits:update", ADMIN_OR_SERVICE,
     [("PUT", RP_ONE + "/traits")], "Replace a provider's traits."),
    ("placement:resource_providers:traits:delete", ADMIN_OR_SERVICE,
     [("DELETE", RP_ONE + "/traits")], "Remove every trait of a provider."),
    ("placement:allocations:manage", ADMIN_OR_SERVICE, [("POST", "/allocations")],
     "Write the allocations of several consumers at once."),
    ("placement:allocations:list", ADMIN_OR_SERVICE,
     [("GET", "/allocations/{consumer_uuid}")], "Show a consumer's allocations."),
    ("placement:allocations:update", ADMIN_OR_SERVICE,
     [("PUT", "/allocations/{consumer_uuid}")], "Replace a consumer's allocations."),
    ("placement:allocations:delete", ADMIN_OR_SERVICE,
     [("DELETE", "/allocations/{consumer_uuid}")], "Delete a consumer's allocations."),
    ("placement:resource_providers:allocations:list", ADMIN_OR_SERVICE,
     [("GET", RP_ONE + "/allocations")], "List the allocations against a provider."),
    ("placement:allocation_candidates:list", ADMIN_OR_SERVICE,
     [("GET", "/allocation_candidates")], "List allocation candidates."),
    ("placement:reshaper:reshape", SERVICE, [("POST", "/reshaper")],
     "Move inventories and allocations between providers at once (a service's job)."),
]

# The view (flask endpoint) each rule guards; /placement/ (versions) needs none.
RULE_OF_ENDPOINT = {
    "placement.list_resource_providers": "placement:resource_providers:list",
    "placement.create_resource_provider": "placement:resource_providers:create",
    "placement.show_resource_provider": "placement:resource_providers:show",
    "placement.update_resource_provider": "placement:resource_providers:update",
    "placement.delete_resource_provider": "placement:resource_providers:delete",
    "placement.list_resource_classes": "placement:resource_classes:list",
    "placement.create_resource_class": "placement:resource_classes:create",
    "placement.show_resource_class": "placement:resource_classes:show",
    "placement.update_resource_class": "placement:resource_classes:update",
    "placement.delete_resource_class": "placement:resource_classes:delete",
    "placement.list_inventories": "placement:resource_providers:inventories:list",
    "placement.create_inventory": "placement:resource_providers:inventories:create",
    "placement.show_inventory": "placement:resource_providers:inventories:show",
    "placement.set_inventories": "placement:resource_providers:inventories:update",
    "placement.update_inventory": "placement:resource_providers:inventories:update",
    "placement.delete_inventories": "placement:resource_providers:inventories:delete",
    "placement.delete_inventory": "placement:resource_providers:inventories:delete",
    "placement.list_provider_aggregates": "placement:resource_providers:aggregates:list",
    "placement.set_provider_aggregates": "placement:resource_providers:aggregates:update",
    "placement.provider_usages": "placement:resource_providers:usages",
    "placement.project_usages": "placement:usages",
    "placement.list_traits": "placement:traits:list",
    "placement.show_trait": "placement:traits:show",
    "placement.create_trait": "placement:traits:update",
    "placement.delete_trait": "placement:traits:delete",
    "placement.list_provider_traits": "placement:resource_providers:traits:list",
    "placement.set_provider_traits": "placement:resource_providers:traits:update",
    "placement.delete_provider_traits": "placement:resource_providers:traits:delete",
    "placement.set_many_allocations": "placement:allocations:manage",
    "placement.show_allocations": "placement:allocations:list",
    "placement.set_allocations": "placement:allocations:update",
    "placement.delete_allocations": "placement:allocations:delete",
    "placement.provider_allocations": "placement:resource_providers:allocations:list",
    "placement.allocation_candidates": "placement:allocation_candidates:list",
    "placement.reshape": "placement:reshaper:reshape",
}


def list_rules() -> list[oslo_policy.RuleDefault]:
    """The base rules, then one documented rule per route rule."""
    routes = []
    for name, check, operations, description in ROUTE_RULES:
        reads = all(method == "GET" for method, _path in operations)
        # NOTE: the old name with the new check: a rename only. Its default never
        # widens the new rule (oslo.policy ORs a deprecated default only when it
        # differs), while a file that overrides the old name still applies.
        renamed = oslo_policy.DeprecatedRule(
            "placement:read" if reads else "placement:write", check,
            deprecated_reason=_PER_ROUTE, deprecated_since="0.1")
        routes.append(oslo_policy.DocumentedRuleDefault(
            name, check, description,
            [{"method": method, "path": "/placement" + path} for method, path in operations],
            scope_types=PROJECT, deprecated_rule=renamed))
    return BASE_RULES + routes
