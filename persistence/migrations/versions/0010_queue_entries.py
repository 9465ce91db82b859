"""queue: requests waiting for capacity

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'queue_entries',
        sa.Column('seq', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('ref_id', sa.String(length=36), nullable=False),
        sa.Column('tenant_id', sa.String(length=64), nullable=False),
        sa.Column('priority', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('deadline', sa.DateTime(), nullable=True),
        sa.Column('last_attempt', sa.DateTime(), nullable=True),
        sa.Column('why', sa.Text(), nullable=True),
        sa.Column('bypassed', sa.Integer(), nullable=False),
        sa.Column('admitted_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('seq', name=op.f('pk_queue_entries')),
        sa.UniqueConstraint('kind', 'ref_id', name=op.f('uq_queue_entries_kind')),
    )
    with op.batch_alter_table('queue_entries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_queue_entries_tenant_id'), ['tenant_id'],
                              unique=False)
        batch_op.create_index('ix_queue_entries_order',
                              ['admitted_at', 'priority', 'seq'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('queue_entries', schema=None) as batch_op:
        batch_op.drop_index('ix_queue_entries_order')
        batch_op.drop_index(batch_op.f('ix_queue_entries_tenant_id'))
    op.drop_table('queue_entries')
