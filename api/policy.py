"""Authorization with oslo.policy: registered defaults, an optional policy file.

Roles are OpenStack's: ``reader`` < ``member`` < ``admin``, project-scoped.
Base rules (override any of them, or any route rule, in ``[api] policy_file``,
YAML or JSON; the file is re-read when it changes, looked at once per request)::

    admin                   role:admin
    project_reader          (role:reader or role:member or role:admin)
                            and project_id:%(project_id)s
    project_member          (role:member or role:admin) and project_id:%(project_id)s
    project_reader_or_admin rule:project_reader or rule:admin
    project_member_or_admin rule:project_member or rule:admin

Route rules are named ``<resource>:<action>`` (``hosts:update``) and every
view names its rule with :func:`authorize`. The target is
``{"project_id": <tenant_id of the path>}`` (the caller's own project on admin
routes), so ``project_reader`` means "reads in the project of the path".
Every route rule is project-scoped: a system-scoped caller
(``OpenStack-System-Scope: all``) passes none of them.

``/placement`` has OpenStack Placement's own rules, by its names, defaults and
scope types (:mod:`fleetflow.api.placement.policies`); oslo.policy's
``[oslo_policy] enforce_new_defaults`` chooses between their new defaults and
their deprecated ones.

Tenant paths: ``/v2/{tenant_id}/...`` is refused with **403** when
``tenant_id`` is not the caller's project, unless the caller is admin
(:func:`check_tenant_path`). 403, not 404: the answer is the same for every
foreign tenant id, existing or not, so it reveals nothing, and it tells a
misconfigured client plainly that it used the wrong project. Resources of
another tenant looked up *inside* one's own path answer 404 (the routes of
reservations, servers and groups do that), so their ids cannot be probed.
"""

from __future__ import annotations

import functools
import os

import flask
from oslo_policy import policy as oslo_policy
from werkzeug import exceptions as wexc

from fleetflow.api import policy_checks
from fleetflow.api.placement import policies as placement_policies
from fleetflow.api.state import current_state

ADMIN = "rule:admin"
READER = "rule:project_reader_or_admin"
MEMBER = "rule:project_member_or_admin"

BASE_RULES = [
    oslo_policy.RuleDefault("context_is_admin", "role:admin",
                            "Decides request contexts' is_admin."),
    oslo_policy.RuleDefault("admin", "role:admin", "An administrator of the cloud."),
    oslo_policy.RuleDefault("service", "role:service", "Another OpenStack service."),
    oslo_policy.RuleDefault("admin_or_service", "rule:admin or rule:service",
                            "An administrator or a service (placement)."),
    oslo_policy.RuleDefault(
        "project_reader",
        "(role:reader or role:member or role:admin) and project_id:%(project_id)s",
        "Any role in the project of the request's path."),
    oslo_policy.RuleDefault(
        "project_member", "(role:member or role:admin) and project_id:%(project_id)s",
        "A member (or admin) of the project of the request's path."),
    oslo_policy.RuleDefault("project_reader_or_admin", "rule:project_reader or rule:admin",
                            "Reads in one's own project, or an administrator."),
    oslo_policy.RuleDefault("project_member_or_admin", "rule:project_member or rule:admin",
                            "Changes in one's own project, or an administrator."),
]

T = "/v2/{tenant_id}"
A = "/v2/admin"

# (rule name, check, method, path, description); a rule of several routes
# gives a tuple of methods and the tuple of their paths. Every rule is checked
# by a route (tests/unit/test_policy_rules.py); add a line here with each new
# route, and remove the line of a route that goes.
ROUTE_RULES = [
    ("hosts:list", ADMIN, "GET", f"{A}/hosts", "List compute hosts."),
    ("hosts:show", ADMIN, "GET", f"{A}/hosts/{{name}}", "Show a compute host."),
    ("hosts:update", ADMIN, "PUT", f"{A}/hosts/{{name}}", "Change a host's state."),
    ("hosts:evacuate", ADMIN, "POST", f"{A}/hosts/{{name}}/evacuate", "Evacuate a host."),
    ("hosts:simulate", ADMIN, "POST", f"{A}/hosts/{{name}}/simulate",
     "Kill or revive a simulated host (fault injection)."),
    ("hosts:recovery_plan", ADMIN, "GET", f"{A}/hosts/{{name}}/recovery-plan",
     "What an automatic recovery of a host would do if it died now (a dry run)."),
    ("recoveries:list", ADMIN, "GET", f"{A}/recoveries",
     "List automatic recoveries of dead hosts and whether they are paused."),
    ("recoveries:show", ADMIN, "GET", f"{A}/recoveries/{{id}}",
     "Show an automatic recovery with its timeline."),
    ("recoveries:pause", ADMIN, "POST", f"{A}/recoveries/pause",
     "Stop automatic recovery cluster-wide."),
    ("recoveries:resume", ADMIN, "POST", f"{A}/recoveries/resume",
     "Let automatic recovery act again."),
    ("recoveries:projects", ADMIN, ("GET", "GET"),
     (f"{A}/recoveries/projects", f"{A}/recoveries/projects/{{project_id}}"),
     "See which servers of a project automatic recovery moves."),
    ("recoveries:update_project", ADMIN, ("PUT", "DELETE"),
     (f"{A}/recoveries/projects/{{project_id}}", f"{A}/recoveries/projects/{{project_id}}"),
     "Choose which servers of a project automatic recovery moves (all, ha, none), or "
     "drop that choice."),
    ("evacuations:create", ADMIN, "POST", f"{A}/evacuations",
     "Evacuate one or several hosts."),
    ("evacuations:list", ADMIN, "GET", f"{A}/evacuations", "List evacuations."),
    ("evacuations:show", ADMIN, "GET", f"{A}/evacuations/{{id}}",
     "Show an evacuation and its moves."),
    ("evacuations:resume", ADMIN, "POST", f"{A}/evacuations/{{id}}/resume",
     "Resume a paused evacuation."),
    ("evacuations:skip", ADMIN, "POST", f"{A}/evacuations/{{id}}/skip",
     "Skip servers of a paused evacuation and go on with the rest."),
    ("evacuations:revert", ADMIN, "POST", f"{A}/evacuations/{{id}}/revert",
     "End a paused evacuation where it stands."),
    ("flavors:list", READER, "GET", f"{T}/flavors", "List flavors."),
    ("flavors:show", READER, "GET", f"{T}/flavors/{{flavor}}", "Show a flavor."),
    ("images:list", READER, "GET", f"{T}/images", "List images."),
    ("images:show", READER, "GET", f"{T}/images/{{image}}", "Show an image."),
    ("reservations:create", MEMBER, "POST", f"{T}/reservations", "Reserve N instances."),
    ("reservations:list", READER, "GET", f"{T}/reservations", "List reservations."),
    ("reservations:show", READER, "GET", f"{T}/reservations/{{id}}", "Show a reservation."),
    ("reservations:delete", MEMBER, "DELETE", f"{T}/reservations/{{id}}",
     "Delete a reservation and its instances."),
    ("servers:list", READER, "GET", f"{T}/servers", "List servers."),
    ("servers:show", READER, "GET", f"{T}/servers/{{id}}", "Show a server."),
    ("servers:delete", MEMBER, "DELETE", f"{T}/servers/{{id}}", "Delete a server."),
    ("servers:show_metadata", READER, "GET", f"{T}/servers/{{id}}/metadata",
     "Show a server's metadata."),
    ("servers:update_metadata", MEMBER, ("PUT", "POST", "DELETE"),
     (f"{T}/servers/{{id}}/metadata", f"{T}/servers/{{id}}/metadata",
      f"{T}/servers/{{id}}/metadata/{{key}}"),
     "Replace or merge a server's metadata, or remove one key of it."),
    ("servers:filter_by_host", ADMIN, "GET", f"{T}/servers?host={{host}}",
     "Filter the server list by host."),
    ("servers:list_all_projects", ADMIN, "GET", f"{T}/servers?all_tenants=1",
     "List every project's servers from a project's list (others: all_tenants is "
     "ignored)."),
    ("servers:admin_list", ADMIN, "GET", f"{A}/servers", "List every project's servers."),
    ("servers:show_host", READER, "GET", f"{T}/servers/{{id}}",
     "See where the project's servers and volumes are, by name: hosts, hosts tried, "
     "vcluster members' hosts and backends, groupings' domains, dry runs' hosts. The "
     "project's readers and members (and administrators) by default; callers it refuses "
     "see null names and opaque host_ids (sha224 of project id and name, as Nova's "
     "hostId) in every view."),
    ("groups:create", MEMBER, "POST", f"{T}/groups", "Create a server group."),
    ("groups:list", READER, "GET", f"{T}/groups", "List server groups."),
    ("groups:show", READER, "GET", f"{T}/groups/{{id}}", "Show a server group."),
    ("groups:update", MEMBER, "PUT", f"{T}/groups/{{id}}", "Update a server group."),
    ("groups:delete", MEMBER, "DELETE", f"{T}/groups/{{id}}", "Delete a server group."),
    ("vclusters:create", MEMBER, "POST", f"{T}/vclusters", "Build a virtual cluster."),
    ("vclusters:list", READER, "GET", f"{T}/vclusters", "List virtual clusters."),
    ("vclusters:show", READER, "GET", f"{T}/vclusters/{{id}}", "Show a virtual cluster."),
    ("vclusters:delete", MEMBER, "DELETE", f"{T}/vclusters/{{id}}",
     "Tear down a virtual cluster."),
    ("vclusters:update", MEMBER, ("PUT", "POST", "DELETE"),
     (f"{T}/vclusters/{{id}}", f"{T}/vclusters/{{id}}/instances",
      f"{T}/vclusters/{{id}}/instances/{{name}}"),
     "Rename a virtual cluster, add members to it or remove one."),
    ("volumes:list", READER, "GET", f"{T}/volumes", "List volumes."),
    ("volumes:show", READER, "GET", f"{T}/volumes/{{id}}", "Show a volume."),
    ("volumes:show_backend", ADMIN, "GET", f"{T}/volumes/{{id}}",
     "See the storage backend a volume is on (others see null)."),
    ("flows:list", READER, "GET", f"{T}/flows", "List the project's flows."),
    ("flows:show", READER, "GET", f"{T}/flows/{{id}}", "Show a flow."),
    ("flows:graph", READER, "GET", f"{T}/flows/{{id}}/graph",
     "Show a flow as a graph: nested flows, atoms, states, timings, failures."),
    ("flows:admin_graph", ADMIN, "GET", f"{A}/flows/{{id}}/graph", "Show any flow's graph."),
    ("flows:admin_list", ADMIN, "GET", f"{A}/flows", "List every flow."),
    ("flows:admin_show", ADMIN, "GET", f"{A}/flows/{{id}}", "Show any flow."),
    ("flows:resume", ADMIN, "POST", f"{A}/flows/{{id}}/resume", "Resume a flow."),
    ("flows:revert", ADMIN, "POST", f"{A}/flows/{{id}}/revert", "Revert a flow."),
    ("queue:list", ADMIN, "GET", f"{A}/queue",
     "List every request waiting for capacity, with its position and why it waits."),
    ("quotas:show", READER, "GET", f"{T}/quotas", "Show the project's quotas."),
    ("quotas:admin_show", ADMIN, "GET", f"{A}/quotas/{{tenant_id}}",
     "Show any project's quotas."),
    ("quotas:update", ADMIN, "PUT", f"{A}/quotas/{{tenant_id}}", "Change a project's quotas."),
    ("events:list", READER, "GET", f"{T}/events",
     "Poll the project's recent changes (reservations, virtual clusters)."),
    ("events:admin_list", ADMIN, "GET", f"{A}/events",
     "Poll every recent change of operations and hosts."),
    ("capacity:show", ADMIN, "GET", f"{A}/capacity",
     "Show the fleet's capacity: total, used and free per region, zone, rack and host."),
    ("audit:run", ADMIN, "GET", f"{A}/audit",
     "Audit placement, instances, hosts and groups for mismatches."),
    ("permissions:show", READER, "GET", f"{T}/permissions",
     "List the operations (route rules) the caller may call in the project."),
]


def list_rules() -> list[oslo_policy.RuleDefault]:
    """Every default rule (also for oslopolicy-sample-generator): fleetflow's, then
    OpenStack Placement's for /placement (:mod:`fleetflow.api.placement.policies`)."""
    routes = [
        oslo_policy.DocumentedRuleDefault(
            name, check, description, _operations(method, path), scope_types=["project"])
        for name, check, method, path, description in ROUTE_RULES]
    return BASE_RULES + routes + placement_policies.list_rules()


def _operations(method: str | tuple, path: str | tuple) -> list[dict]:
    if isinstance(method, str):
        return [{"method": method, "path": path}]
    return [{"method": m, "path": p} for m, p in zip(method, path, strict=True)]


# The request's WSGI environ key (with the enforcer's id) that says this
# enforcer looked at its policy files for the request.
_LOADED_KEY = "fleetflow.policy_loaded"


class RequestEnforcer(oslo_policy.Enforcer):
    """oslo.policy's Enforcer, looking for changed policy files once per request.

    oslo.policy looks for the policy file and directories (a search of the config
    directories and a stat each) on every check, and a request makes two or more
    (``context_is_admin``, its route's rule). One look per request picks a change up
    on the next request just as well, and one request never mixes two policies.
    Outside a request (start-up, tools) every load looks, as oslo.policy's does.
    """

    def load_rules(self, force_reload: bool = False) -> None:
        if not force_reload and flask.has_request_context():
            environ, key = flask.request.environ, f"{_LOADED_KEY}.{id(self)}"
            if environ.get(key):
                return
            environ[key] = True
        super().load_rules(force_reload)


def policy_file(conf) -> str:
    """``[api] policy_file`` as oslo.policy looks for it.

    oslo.policy reads an absolute path as is, and looks for a relative one in the
    directory of the configuration file (or ``--config-dir``), then in
    ``~/.fleetflow/``, ``~/``, ``/etc/fleetflow/`` and ``/etc/``. fleetflow runs
    without any configuration file too (defaults and ``FLEETFLOW_*`` variables):
    then the working directory stands for the configuration file's, and a file
    found there is used.
    """
    name = conf.api.policy_file
    if os.path.isabs(name) or conf.config_file or conf.config_dir:
        return name
    return os.path.abspath(name) if os.path.exists(name) else name


def make_enforcer(conf) -> oslo_policy.Enforcer:
    """An Enforcer with the defaults registered and the policy file applied if found."""
    policy_checks.install()
    enforcer = RequestEnforcer(conf, policy_file=policy_file(conf))
    # NOTE: Placement's deprecated defaults differ from its new ones on purpose
    # ([oslo_policy] enforce_new_defaults chooses); a warning per rule at every
    # start says nothing an operator can act on (Placement silences them too).
    enforcer.suppress_default_change_warnings = True
    enforcer.register_defaults(list_rules())
    # NOTE: load now, so that a malformed policy file fails at start-up
    # rather than on the first request.
    try:
        enforcer.load_rules()
    except ValueError as exc:
        raise ValueError(f"Policy file {enforcer.policy_path or enforcer.policy_file} is "
                         f"malformed: {exc}") from exc
    return enforcer


def check_is_admin(enforcer: oslo_policy.Enforcer, context) -> bool:
    return enforcer.enforce("context_is_admin", {}, context)


def enforce(rule: str, target: dict | None = None) -> None:
    """Answer 403 unless the current caller passes ``rule`` on ``target``."""
    context = flask.g.context
    target = target or {"project_id": context.project_id}
    try:
        current_state().enforcer.authorize(rule, target, context, do_raise=True)
    except (oslo_policy.PolicyNotAuthorized, oslo_policy.InvalidScope):
        raise wexc.Forbidden(f"Policy does not allow {rule} to be performed.") from None


def allowed(rule: str, target: dict | None = None) -> bool:
    """Whether the current caller passes ``rule`` on ``target`` (for what a rule
    changes in an answer rather than refuses)."""
    context = flask.g.context
    target = target or {"project_id": context.project_id}
    try:
        return bool(current_state().enforcer.enforce(rule, target, context))
    except oslo_policy.InvalidScope:
        return False


def authorize(rule: str):
    """Decorator of a view method: enforce ``rule`` before anything else runs.

    Put it above flask-smorest's decorators so that a caller who may not use
    the route learns nothing from validation errors. The rule name is kept in
    ``view.policy_rule`` (tests check every route has one).
    """
    def decorate(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            tenant = kwargs.get("tenant_id") or flask.g.context.project_id
            enforce(rule, {"project_id": tenant})
            return view(*args, **kwargs)

        wrapper.policy_rule = rule
        return wrapper

    return decorate


def check_tenant_path() -> None:
    """before_request hook (after authentication): 403 on another tenant's path."""
    view_args = flask.request.view_args or {}
    tenant = view_args.get("tenant_id")
    context = getattr(flask.g, "context", None)
    if tenant is None or context is None or context.is_admin:
        return
    if tenant != context.project_id:
        raise wexc.Forbidden(
            f"The path names project {tenant}, but the request is for project "
            f"{context.project_id}.")
