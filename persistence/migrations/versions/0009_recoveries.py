"""automatic host recovery: its detections, the operators' switch, server metadata

Revision ID: 0009
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'recoveries',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('host', sa.String(length=255), nullable=False),
        sa.Column('zone', sa.String(length=64), nullable=True),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('open_host', sa.String(length=255), nullable=True),
        sa.Column('suspect_at', sa.DateTime(), nullable=False),
        sa.Column('silent_since', sa.DateTime(), nullable=True),
        sa.Column('dead_at', sa.DateTime(), nullable=True),
        sa.Column('fenced_at', sa.DateTime(), nullable=True),
        sa.Column('finished_at', sa.DateTime(), nullable=True),
        sa.Column('evacuation_id', sa.String(length=36), nullable=True),
        sa.Column('timeline', sa.JSON(), nullable=False),
        sa.Column('detail', sa.String(length=255), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_recoveries')),
        sa.UniqueConstraint('open_host', name=op.f('uq_recoveries_open_host')),
    )
    with op.batch_alter_table('recoveries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_recoveries_host'), ['host'], unique=False)
        batch_op.create_index(batch_op.f('ix_recoveries_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_recoveries_evacuation_id'), ['evacuation_id'],
                              unique=False)
    op.create_table(
        'recovery_control',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('paused', sa.Boolean(), nullable=False),
        sa.Column('reason', sa.String(length=255), nullable=True),
        sa.Column('user_id', sa.String(length=64), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_recovery_control')),
    )
    # Server metadata: ha=true, recovery=never, recovery_priority=N.
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('metadata', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_column('metadata')
    op.drop_table('recovery_control')
    with op.batch_alter_table('recoveries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_recoveries_evacuation_id'))
        batch_op.drop_index(batch_op.f('ix_recoveries_status'))
        batch_op.drop_index(batch_op.f('ix_recoveries_host'))
    op.drop_table('recoveries')
