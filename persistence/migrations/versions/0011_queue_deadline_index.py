"""queue: an index on the waiting requests' deadlines

An admission pass looks for the waiting requests whose deadline has passed,
wherever they stand: without it that read the whole queue.

Revision ID: 0011
Revises: 0010
"""

from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('queue_entries', schema=None) as batch_op:
        batch_op.create_index('ix_queue_entries_deadline', ['admitted_at', 'deadline'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('queue_entries', schema=None) as batch_op:
        batch_op.drop_index('ix_queue_entries_deadline')
