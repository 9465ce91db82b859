"""instances: an index on (reservation_id, status) for a reservation's progress

Clients poll a reservation's progress (its instances counted by status) while
it builds; with the reservation_id index alone the count read every instance
row of the reservation, about 6 ms for 10,000 of them on SQLite. With both
columns in one index the count reads the index alone.

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.create_index('ix_instances_reservation_status', ['reservation_id', 'status'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_index('ix_instances_reservation_status')
