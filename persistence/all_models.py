"""Imports every module that defines tables, so ``Base.metadata`` knows them all."""

from fleetflow.persistence import fences, intents, models, queue, recoveries  # noqa: F401
from fleetflow.persistence import jobs as job_models  # noqa: F401
from fleetflow.persistence.logbook import models as logbook_models  # noqa: F401
from fleetflow.persistence.placement import models as placement_models  # noqa: F401
