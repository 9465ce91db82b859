"""Jobboards: where flows' jobs are posted, claimed under a lease and consumed.

:mod:`.sql` is the embedded board in fleetflow's database, :mod:`.redis`
TaskFlow's Redis board with claims that expire; :mod:`.boards` makes the one
``[jobboard] backend`` names.
"""
