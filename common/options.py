"""Every option of fleetflow, by group: what :mod:`fleetflow.common.config` loads.

Declarations only; how a process builds its configuration from them (defaults,
a config file, ``FLEETFLOW_<GROUP>_<OPTION>``) is in ``config``.
"""

from __future__ import annotations

from oslo_config import cfg
from oslo_middleware import cors
from oslo_policy import opts as policy_opts

DEFAULT_STATE_DIR = "fleetflow-state"
DEFAULT_DATABASE_FILE = "fleetflow.db"

DEFAULT_OPTS = [
    cfg.StrOpt("state_dir", default=DEFAULT_STATE_DIR,
               help="Directory of every file 'fleetflow serve' and its agents write: the "
                    "default SQLite database, the simulated hosts' guests, the RPC "
                    "sockets, the conductors' liveness records. Relative paths are "
                    "resolved in the working directory; '.' is the layout of earlier "
                    "versions (everything in the working directory)."),
    cfg.BoolOpt("debug", default=False, help="Log at DEBUG level."),
    cfg.BoolOpt("serve_on_one_cpu", default=True,
                help="'fleetflow serve' keeps its own threads (API, conductors, engines) on "
                     "one CPU once started, leaving the others to its agent processes: its "
                     "threads share one interpreter lock, and spread over CPUs every "
                     "hand-over of the lock wakes a thread on another CPU (Linux; nothing "
                     "changes with a single CPU)."),
    cfg.FloatOpt("switch_interval", default=0.02, min=0.001, max=1.0,
                 help="Seconds a thread running Python may keep the interpreter lock "
                      "while others wait for it, in 'fleetflow serve', 'conductor' and "
                      "'compute-agent' (CPython's default is 0.005: with a thousand "
                      "member threads of a big reservation, handing it over that often "
                      "cost more than the work)."),
]

DATABASE_OPTS = [
    cfg.StrOpt("connection", default=None,
               help="SQLAlchemy URL of the fleetflow database. Unset: SQLite in "
                    "state_dir (sqlite:///<state_dir>/fleetflow.db). A relative SQLite "
                    "path is resolved in the working directory; SQLite runs in WAL mode."),
    cfg.IntOpt("pool_size", default=10, min=1, help="Connection pool size (PostgreSQL)."),
    cfg.IntOpt("max_overflow", default=20, min=0, help="Connections beyond pool_size."),
    cfg.FloatOpt("max_retry_seconds", default=120.0, min=0.0,
                 help="How long a write that meets a lost database connection (a "
                      "PostgreSQL restart, a failover) is retried before its flow stops "
                      "without consuming its job; the default outlasts a restart. "
                      "0: never retry."),
    cfg.FloatOpt("retry_interval", default=0.5, min=0.01,
                 help="First pause between those retries; it doubles up to 5 s."),
]

API_OPTS = [
    cfg.HostAddressOpt("host", default="127.0.0.1", help="Address the API listens on."),
    cfg.PortOpt("port", default=8774, help="Port the API listens on."),
    cfg.StrOpt("auth_strategy", default="noauth", choices=["noauth", "keystone"],
               help="noauth: identity from X-Project-Id / X-User-Id / X-Roles headers "
                    "(development and tests only); keystone: keystonemiddleware tokens."),
    cfg.IntOpt("max_body_bytes", default=112 * 1024, min=1024,
               help="Largest request body accepted; larger ones answer 413."),
    cfg.IntOpt("max_reservation_count", default=10000, min=1,
               help="Largest count one reservation may ask for (and most members of "
                    "one virtual cluster, whose request must also fit max_body_bytes)."),
    cfg.IntOpt("page_size", default=1000, min=1,
               help="Default page size of list routes (the default fleet's 128 hosts "
                    "fit on one page)."),
    cfg.IntOpt("server_threads", default=16, min=1,
               help="Threads of 'fleetflow serve''s HTTP server: requests served at "
                    "once; idle keep-alive connections hold none."),
    cfg.StrOpt("policy_file", default="policy.yaml",
               help="oslo.policy overrides; the defaults apply when it does not exist."),
]

MESSAGING_OPTS = [
    cfg.StrOpt("transport_url", default="fake:",
               help="oslo.messaging transport that carries calls to the compute hosts. "
                    "'fake:' stays inside one process (with compute agent_processes, "
                    "'fleetflow serve' reaches its agents over Unix sockets instead); "
                    "'kombu+memory://localhost//' also stays inside one process, and "
                    "its idle servers keep polling; a 'rabbit://user:password@host:5672/' "
                    "URL reaches agents in other processes and on other machines."),
    cfg.StrOpt("topic", default="fleetflow-compute", help="RPC topic of the compute hosts."),
    cfg.IntOpt("rpc_timeout", default=60, min=1,
               help="Seconds before an RPC call gives up; its outcome is then unknown."),
]

JOBBOARD_OPTS = [
    cfg.StrOpt("backend", default="sql", choices=["sql", "redis"],
               help="sql: jobs live in the fleetflow database (embedded, no server); "
                    "redis: TaskFlow's Redis jobboard (distributed)."),
    cfg.StrOpt("redis_url", default="redis://127.0.0.1:6379/0", help="Redis of the board."),
    cfg.StrOpt("board_name", default="fleetflow", help="Name (and Redis namespace) of the board."),
    cfg.IntOpt("claim_expiry", default=30, min=2,
               help="Seconds a conductor's claim lasts unless its keep-alive extends it."),
    cfg.FloatOpt("keepalive_interval", default=10.0, min=0.1,
                 help="Seconds between a conductor's claim extensions."),
]

CONDUCTOR_OPTS = [
    cfg.IntOpt("workers", default=2, min=0,
               help="Conductor threads inside 'fleetflow serve' (0: run none)."),
    cfg.StrOpt("engine", default="fleetflow-parallel",
               choices=["fleetflow-parallel", "parallel"],
               help="TaskFlow engine that runs flows. 'fleetflow-parallel' is TaskFlow's "
                    "parallel engine with fleetflow's speed-ups, storing checkpoints in "
                    "batches before any atom they lead to starts (docs/engine.md); "
                    "'parallel' is TaskFlow's stock engine, storing each checkpoint at "
                    "once. A flow written by one resumes under the other. On a TaskFlow "
                    "release fleetflow-parallel is not tested on, 'parallel' runs instead "
                    "and one warning says so."),
    cfg.IntOpt("engine_workers", default=1024, min=1,
               help="Most threads of one flow's parallel engine, and of the pool the "
                    "members of group tasks run on. A boot of a chain (or a member's "
                    "retry in a group) holds its thread until the host answers, so with "
                    "fewer threads a reservation boots in waves of this many; a group "
                    "sends its members' first builds together from its own thread. A "
                    "bound, not a count: "
                    "the fleetflow-parallel engine starts a thread only when no worker "
                    "is idle; the stock engine starts one per task until the bound."),
    cfg.IntOpt("instances_per_atom", default=100, min=1,
               help="A reservation of more instances than this is built in groups of "
                    "this many, one task a group, instead of a retry, a claim and a boot "
                    "task each; an evacuation of more servers moves each lane's servers "
                    "in groups of this many, instead of five tasks a server; a vcluster "
                    "run of more members builds them in groups of this many, instead "
                    "of two tasks a member; a reservation's teardown of more instances "
                    "deletes them in groups of this many, instead of a task each: the "
                    "engine's cost per atom is then paid "
                    "once a group. Read when a run is submitted; its flow keeps the "
                    "shape it was submitted with (docs/provision.md, docs/evacuation.md "
                    "and docs/vcluster.md)."),
    cfg.StrOpt("name", default=None, help="Conductor name; defaults to host name and pid."),
    cfg.FloatOpt("reconcile_interval", default=10.0, min=0.0,
                 help="Seconds between two passes of the reconciler that rebuilds the "
                      "jobboard from the database ('fleetflow serve' and 'fleetflow "
                      "conductor' each run one; one process per board does the work of a "
                      "period): committed submissions get their flow and job, unfinished "
                      "flows whose job the board lost get it again, finished flows' jobs "
                      "are consumed. 0: no reconciler in this process."),
]

COMPUTE_OPTS = [
    cfg.FloatOpt("boot_seconds", default=0.0, min=0.0,
                 help="Simulated boot latency of the fake driver."),
    cfg.BoolOpt("batch_builds", default=True,
                help="Send the builds bound for one compute agent together, many in one "
                     "RPC, when they come faster than the agent answers (off: one RPC "
                     "a build, as with agents older than batched builds)."),
    cfg.IntOpt("max_concurrent_builds", default=10, min=1,
               help="Builds one simulated host runs at once (as Nova's option)."),
    cfg.StrOpt("state_path", default="fleetflow-hosts.db",
               help="Where simulated hosts keep their guests, so they outlive the process "
                    "(relative to state_dir)."),
    cfg.BoolOpt("simulate", default=True,
                help="'fleetflow serve' simulates every host of the fleet itself."),
    cfg.IntOpt("agent_processes", default=2, min=0,
               help="Child processes 'fleetflow serve' simulates the fleet in, each serving "
                    "a share of the hosts: they then boot on the machine's other cores "
                    "instead of queueing for the serve process's interpreter lock behind "
                    "the API and conductors. With transport_url 'fake:' they are reached "
                    "over Unix sockets in state_dir (the fleetflow-ipc transport). 0: the "
                    "hosts run inside the serve process, on 'fake:'."),
    cfg.IntOpt("agent_threads", default=None, min=1,
               help="Worker threads of one compute agent's RPC server. Unset: one per "
                    "build slot of the hosts the server serves (hosts x "
                    "max_concurrent_builds: a build holds its thread for its whole boot) "
                    "plus oslo.messaging's usual 64 for other calls, at most "
                    "max_agent_threads."),
    cfg.IntOpt("max_agent_threads", default=2048, min=1,
               help="Most worker threads of one RPC server when agent_threads is unset "
                    "(builds beyond them wait for a thread, as beyond a host's slots)."),
    cfg.FloatOpt("migrate_seconds", default=0.0, min=0.0,
                 help="Simulated duration of a cold migration (copy) and of a rebuild "
                      "(spawn from the image) in the fake driver."),
    cfg.FloatOpt("live_migrate_seconds", default=0.0, min=0.0,
                 help="Simulated duration of a live migration in the fake driver."),
    cfg.IntOpt("max_concurrent_outgoing_migrations", default=4, min=1,
               help="Moves one host sends at once; more wait queued on the host."),
    cfg.IntOpt("max_concurrent_incoming_migrations", default=4, min=1,
               help="Moves one host receives at once; more wait queued on the host."),
    cfg.FloatOpt("move_poll_interval", default=0.05, min=0.001,
                 help="How often a move task asks the destination how its move goes "
                      "(a long move is started, then polled: no RPC call waits for it)."),
    cfg.IntOpt("service_down_time", default=60, min=1,
               help="Seconds without a heartbeat after which a host reads 'down' "
                    "(longer than heartbeat_interval, or serving processes refuse to start)."),
    cfg.FloatOpt("heartbeat_interval", default=10.0, min=0.1,
                 help="How often a compute agent reports its living hosts' heartbeat."),
]

FLEET_OPTS = [
    cfg.StrOpt("file", default=None,
               help="Fleet YAML loaded into an empty database by 'fleetflow serve'; "
                    "the shipped default fleet when unset."),
]

PLACEMENT_OPTS = [
    cfg.StrOpt("backend", default="local", choices=["local", "http"],
               help="local: the allocation store in the fleetflow database; "
                    "http: any OpenStack Placement endpoint."),
    cfg.StrOpt("endpoint", default=None, help="Placement URL when backend = http."),
    cfg.StrOpt("token", default="admin", help="X-Auth-Token sent to an http endpoint."),
    cfg.IntOpt("max_retries", default=10, min=0,
               help="Retries of a write that lost a generation race."),
]

SCHEDULER_OPTS = [
    cfg.IntOpt("alternates", default=2, min=0, help="Alternate hosts given per instance."),
    cfg.StrOpt("weigher", default="spread", choices=["spread", "pack"],
               help="spread: least used host first; pack: most used host first."),
    cfg.IntOpt("max_reschedules", default=3, min=0,
               help="How many fresh hosts an instance of a reservation may try after "
                    "its primary and alternate hosts all failed, each chosen from the "
                    "cloud as it is then, excluding the hosts already tried. A try "
                    "that lost its claim to a concurrent reservation does not count. "
                    "Read when a reservation is submitted; its flow keeps the value."),
]

CLOUD_OPTS = [
    cfg.StrOpt("driver", default="simulated", choices=["simulated", "openstack"],
               help="What fleetflow's flows act on. simulated: the hosts fleetflow "
                    "simulates itself (its compute agents and its own placement). "
                    "openstack: a real OpenStack cloud through Nova's and Placement's "
                    "public APIs ([openstack] cloud names it)."),
]

OPENSTACK_OPTS = [
    cfg.StrOpt("cloud", default=None,
               help="Name of the cloud in clouds.yaml (openstacksdk's conventions: "
                    "OS_CLIENT_CONFIG_FILE, ./clouds.yaml, ~/.config/openstack/). Unset: "
                    "OS_CLOUD."),
    cfg.StrOpt("clouds_yaml", default=None,
               help="A clouds.yaml to read instead of openstacksdk's usual places."),
    cfg.FloatOpt("sync_interval", default=60.0, min=0.0,
                 help="Seconds between two syncs of the cloud's hosts, zones, "
                      "aggregates, inventories and usage into fleetflow's rows, in every "
                      "conductor. 0: only 'fleetflow fleet sync'."),
    cfg.BoolOpt("tenant_projects", default=True,
                help="Make a tenant's servers and server groups in the tenant's own "
                     "project (the tenant id is the cloud's project id), with fleetflow's "
                     "credentials scoped to it: its user needs a role in every tenant's "
                     "project and credentials that can be re-scoped (a password or the "
                     "like, not a fixed token). False: everything in fleetflow's project."),
    cfg.FloatOpt("poll_interval", default=0.5, min=0.05,
                 help="Seconds between two looks at a server being built or moved."),
    cfg.FloatOpt("build_timeout", default=600.0, min=1.0,
                 help="How long a server may stay BUILD before its boot fails."),
    cfg.FloatOpt("move_timeout", default=1800.0, min=1.0,
                 help="How long a migration or evacuation may run before it fails."),
]

RECOVERY_OPTS = [
    cfg.BoolOpt("enabled", default=False,
                help="Recover dead hosts without an operator: fence them, then rebuild "
                     "their servers elsewhere (docs/recovery.md). The embedded demo fleet "
                     "of 'fleetflow serve' turns it on."),
    cfg.FloatOpt("interval", default=2.0, min=0.1,
                 help="Seconds between two looks of the monitor at the hosts."),
    cfg.FloatOpt("confirm_seconds", default=30.0, min=0.0,
                 help="How long a host whose heartbeat is older than [compute] "
                      "service_down_time must also fail its ping before it is dead."),
    cfg.StrOpt("on_error", default="pause", choices=["pause", "continue", "revert"],
               help="on_error of the evacuations the monitor starts."),
    cfg.FloatOpt("max_dead_fraction", default=0.2, min=0.0, max=1.0,
                 help="Storm guard: when more than this share of a zone's hosts, or of "
                      "the fleet's, look dead at once, nothing is evacuated."),
    cfg.IntOpt("max_concurrent", default=8, min=1,
               help="Most hosts in recovery (fenced, their evacuation unfinished) at once."),
    cfg.StrOpt("servers", default="all", choices=["all", "ha"],
               help="all: every server of a dead host; ha: only those with metadata "
                    "ha=true. Servers with metadata recovery=never are never moved."),
    cfg.StrOpt("where", default="any", choices=["any", "reserve", "zone"],
               help="any: any host that fits; reserve: the hosts of reserve_pool first "
                    "(brought up on demand), any host when they are not enough; zone: "
                    "hosts of the dead host's zone only."),
    cfg.StrOpt("reserve_pool", default="reserve",
               help="The pool of reserve hosts: hosts whose capability 'reserve_pool' "
                    "has this value."),
    cfg.IntOpt("max_parallel", default=8, min=1, max=256,
               help="max_parallel of the evacuations the monitor starts."),
]

QUOTA_OPTS = [
    cfg.IntOpt("instances", default=10000, min=-1, help="Instances per tenant (-1: no limit)."),
    cfg.IntOpt("vcpus", default=40000, min=-1, help="VCPUs per tenant (-1: no limit)."),
    cfg.IntOpt("ram_mb", default=80 * 1024 * 1024, min=-1,
               help="RAM in MB per tenant (-1: no limit)."),
    cfg.IntOpt("volumes", default=1000, min=-1, help="Volumes per tenant (-1: no limit)."),
    cfg.IntOpt("gigabytes", default=100000, min=-1,
               help="Volume gigabytes per tenant (-1: no limit)."),
]

QUEUE_OPTS = [
    cfg.IntOpt("max_bypass", default=8, min=0,
               help="Admissions of requests behind the head of the queue (backfill) "
                    "before the head's hosts are held back from backfill."),
    cfg.FloatOpt("reserve_after", default=600.0, min=0.0,
                 help="Seconds the head of the queue waits before its hosts are held "
                      "back from backfill, however few bypasses it saw (0: never by age)."),
    cfg.FloatOpt("interval", default=10.0, min=0.0,
                 help="Seconds between two admission passes when nothing signalled freed "
                      "capacity: the safety net (0: no admitter in this process)."),
    cfg.FloatOpt("poll_interval", default=0.05, min=0.01,
                 help="Seconds between two looks at the capacity stamp (one indexed "
                      "aggregate query) while requests wait: a change starts an "
                      "admission pass. While none waits, it is looked at every second."),
    cfg.IntOpt("scan_depth", default=64, min=1,
               help="Queued requests one admission pass examines, from the head: a "
                    "pass costs this many scheduling attempts at most."),
    cfg.IntOpt("max_priority", default=10, min=0,
               help="Highest priority a project may give a queued request (0 is the "
                    "lowest and the default)."),
    cfg.FloatOpt("default_timeout", default=0.0, min=0.0,
                 help="queue_timeout of a queued request that gives none (0: wait until "
                      "admitted or cancelled)."),
    cfg.BoolOpt("fair_share", default=True,
                help="At equal priority, admit a project below its share of the vCPUs in "
                     "use before a project above it."),
]

METRICS_OPTS = [
    cfg.PortOpt("port", default=0,
                help="Port where a standalone conductor or compute agent serves its "
                     "Prometheus metrics at /metrics (0: not served). fleetflow serve "
                     "answers /metrics on its API port instead; its agent processes "
                     "serve theirs on the ports after this one (agent k: port + 1 + k)."),
    cfg.StrOpt("host", default="127.0.0.1",
               help="Address the metrics port listens on."),
]

OPTS: dict[str | None, list[cfg.Opt]] = {
    None: DEFAULT_OPTS,
    "database": DATABASE_OPTS,
    "api": API_OPTS,
    "messaging": MESSAGING_OPTS,
    "jobboard": JOBBOARD_OPTS,
    "conductor": CONDUCTOR_OPTS,
    "compute": COMPUTE_OPTS,
    "fleet": FLEET_OPTS,
    "placement": PLACEMENT_OPTS,
    "scheduler": SCHEDULER_OPTS,
    "quota": QUOTA_OPTS,
    "recovery": RECOVERY_OPTS,
    "queue": QUEUE_OPTS,
    "metrics": METRICS_OPTS,
    "cloud": CLOUD_OPTS,
    "openstack": OPENSTACK_OPTS,
    # The libraries' own groups, so that FLEETFLOW_OSLO_POLICY_ENFORCE_NEW_DEFAULTS and
    # FLEETFLOW_CORS_ALLOWED_ORIGIN work as every other option: [oslo_policy]
    # (enforce_new_defaults, policy_dirs ...) and [cors] (allowed_origin ...).
    **dict(policy_opts.list_opts()),
    "cors": cors.CORS_OPTS,
}
