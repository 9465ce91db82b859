"""Configuration: oslo.config options, a config file, and FLEETFLOW_<GROUP>_<OPTION>.

Every option can be given three ways, the later winning: its default, a config
file (``fleetflow --config-file F``), and an environment variable named
``FLEETFLOW_<GROUP>_<OPTION>`` (``FLEETFLOW_DATABASE_CONNECTION``,
``FLEETFLOW_API_PORT``; options of ``[DEFAULT]`` are ``FLEETFLOW_<OPTION>``).

Each process builds its own ``ConfigOpts`` with :func:`load`, so tests can run
several differently configured clouds side by side.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from oslo_config import cfg, types

# The options themselves, by group (OPTS), are declared in options.py.
from fleetflow.common.options import DEFAULT_DATABASE_FILE, DEFAULT_STATE_DIR, OPTS  # noqa: F401

ENV_PREFIX = "FLEETFLOW_"

def list_opts():
    """For oslo-config-generator: every group with its options."""
    return [(group or "DEFAULT", opts) for group, opts in OPTS.items()]


def env_name(group: str | None, option: str) -> str:
    parts = [ENV_PREFIX.rstrip("_")] + ([group] if group else []) + [option]
    return "_".join(parts).upper().replace("-", "_")


def _apply_environment(conf: cfg.ConfigOpts, environ: Mapping[str, str]) -> None:
    for group, opts in OPTS.items():
        for opt in opts:
            value = environ.get(env_name(group, opt.dest))
            if value is None:
                continue
            if opt.multi:  # a MultiStrOpt: its values separated by commas
                conf.set_override(opt.dest, [v for v in value.split(",") if v], group=group)
                continue
            # NOTE: set_override stores the value as given; convert it with the
            # option's own type so a bad value fails here, naming the variable.
            try:
                converted = opt.type(value) if opt.type is not None else value
            except ValueError as exc:
                raise cfg.ConfigFileValueError(
                    f"{env_name(group, opt.dest)}={value!r}: {exc}") from exc
            if isinstance(opt.type, types.String) and value == "":
                converted = None
            conf.set_override(opt.dest, converted, group=group)


def environment_of(conf: cfg.ConfigOpts) -> dict[str, str]:
    """``conf``'s every value as FLEETFLOW_* variables: a child process given them
    (and no config file) loads the same configuration, overrides included."""
    environ = {}
    for group, opts in OPTS.items():
        values = conf[group] if group else conf
        for opt in opts:
            value = values[opt.dest]
            if value is None:
                continue
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, list):
                value = ",".join(str(v) for v in value)
            environ[env_name(group, opt.dest)] = str(value)
    return environ


# The defaults of [cors] allow_headers and expose_headers: the headers fleetflow's
# clients send and read, beyond the simple ones CORS always allows.
CORS_ALLOW_HEADERS = ["X-Auth-Token", "X-Project-Id", "X-User-Id", "X-Roles",
                      "OpenStack-API-Version", "OpenStack-System-Scope", "Idempotency-Key"]
CORS_EXPOSE_HEADERS = ["X-OpenStack-Request-Id", "OpenStack-API-Version", "Location"]


def make_conf() -> cfg.ConfigOpts:
    """A fresh ConfigOpts with every fleetflow option registered, nothing parsed."""
    conf = cfg.ConfigOpts()
    for group, opts in OPTS.items():
        conf.register_opts(opts, group=group)
    conf.set_default("allow_headers", CORS_ALLOW_HEADERS, group="cors")
    conf.set_default("expose_headers", CORS_EXPOSE_HEADERS, group="cors")
    return conf


def load(args: Sequence[str] = (), config_files: Sequence[str] | None = None,
         environ: Mapping[str, str] | None = None) -> cfg.ConfigOpts:
    """Build the configuration of one process.

    ``args`` are oslo.config command-line arguments (``--config-file F``);
    ``config_files`` (when given) are read in that order; then ``environ``
    (``os.environ`` by default) overrides both.
    """
    conf = make_conf()
    conf(list(args), project="fleetflow", default_config_files=list(config_files or []),
         default_config_dirs=[], validate_default_values=True)
    _apply_environment(conf, os.environ if environ is None else environ)
    _default_database_in_state_dir(conf)
    return conf


class ConflictingOptions(cfg.Error):
    """Options each valid on its own that cannot work together."""


def check(conf: cfg.ConfigOpts) -> None:
    """Refuse options that contradict each other; every serving process calls it at start."""
    down, beat = conf.compute.service_down_time, conf.compute.heartbeat_interval
    if down <= beat:
        raise ConflictingOptions(
            f"[compute] service_down_time ({down} s, "
            f"{env_name('compute', 'service_down_time')}) must be longer than [compute] "
            f"heartbeat_interval ({beat} s, {env_name('compute', 'heartbeat_interval')}): "
            "every host would read 'down' between two heartbeats")


def openstack_mode(conf: cfg.ConfigOpts) -> bool:
    """Whether fleetflow drives a real OpenStack cloud ([cloud] driver = openstack)."""
    return conf.cloud.driver == "openstack"


def move_poll_interval(conf: cfg.ConfigOpts) -> float:
    """Seconds between two asks about a move under way: a simulated host answers from
    memory, a real Nova answers each ask with API and database calls."""
    if openstack_mode(conf):
        return conf.openstack.poll_interval
    return conf.compute.move_poll_interval


def simulates_hosts(conf: cfg.ConfigOpts) -> bool:
    """Whether this process's cloud is fleetflow's own simulation and it serves its hosts."""
    return not openstack_mode(conf) and conf.compute.simulate


def _default_database_in_state_dir(conf: cfg.ConfigOpts) -> None:
    # A default, not an override: an explicit connection (file, environment,
    # set_override) always wins, and set_state_dir can move it later.
    conf.set_default("connection", "sqlite:///" + state_path(conf, DEFAULT_DATABASE_FILE),
                     group="database")


def set_state_dir(conf: cfg.ConfigOpts, path: str) -> None:
    """Use ``path`` as ``[DEFAULT] state_dir``, the default database moving with it."""
    conf.set_override("state_dir", path)
    _default_database_in_state_dir(conf)


def state_path(conf: cfg.ConfigOpts, name: str) -> str:
    """A path inside [DEFAULT] state_dir, unless ``name`` is already absolute."""
    if os.path.isabs(name):
        return name
    return os.path.join(conf.state_dir, name)
