"""evacuations, their moves, host heartbeats and the evacuation lock

Revision ID: 0005
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('hosts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('heartbeat_at', sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column('evacuation_id', sa.String(length=36), nullable=True))
    op.create_table(
        'evacuations',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('hosts', sa.JSON(), nullable=False),
        sa.Column('mode', sa.String(length=16), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('on_error', sa.String(length=16), nullable=False),
        sa.Column('max_parallel', sa.Integer(), nullable=False),
        sa.Column('fallback', sa.String(length=8), nullable=False),
        sa.Column('target_hosts', sa.JSON(), nullable=True),
        sa.Column('reason', sa.String(length=255), nullable=True),
        sa.Column('user_id', sa.String(length=64), nullable=True),
        sa.Column('flow_id', sa.String(length=36), nullable=True),
        sa.Column('runs', sa.JSON(), nullable=False),
        sa.Column('stopping', sa.String(length=16), nullable=True),
        sa.Column('fault', sa.JSON(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_evacuations')),
    )
    with op.batch_alter_table('evacuations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_evacuations_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_evacuations_flow_id'), ['flow_id'], unique=False)
    op.create_table(
        'evacuation_moves',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('evacuation_id', sa.String(length=36), nullable=False),
        sa.Column('instance_id', sa.String(length=36), nullable=False),
        sa.Column('index', sa.Integer(), nullable=False),
        sa.Column('tenant_id', sa.String(length=64), nullable=False),
        sa.Column('source', sa.String(length=255), nullable=False),
        sa.Column('destination', sa.String(length=255), nullable=True),
        sa.Column('mode', sa.String(length=16), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('step', sa.String(length=16), nullable=True),
        sa.Column('migration_id', sa.String(length=36), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('hosts_tried', sa.JSON(), nullable=False),
        sa.Column('volumes_lost', sa.JSON(), nullable=False),
        sa.Column('fault', sa.JSON(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['evacuation_id'], ['evacuations.id'],
                                name=op.f('fk_evacuation_moves_evacuation_id_evacuations'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_evacuation_moves')),
        sa.UniqueConstraint('evacuation_id', 'instance_id',
                            name=op.f('uq_evacuation_moves_evacuation_id')),
        sa.UniqueConstraint('migration_id', name=op.f('uq_evacuation_moves_migration_id')),
    )
    with op.batch_alter_table('evacuation_moves', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_evacuation_moves_evacuation_id'),
                              ['evacuation_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_evacuation_moves_instance_id'), ['instance_id'],
                              unique=False)
        batch_op.create_index(batch_op.f('ix_evacuation_moves_source'), ['source'],
                              unique=False)
        batch_op.create_index(batch_op.f('ix_evacuation_moves_status'), ['status'],
                              unique=False)


def downgrade() -> None:
    op.drop_table('evacuation_moves')
    op.drop_table('evacuations')
    with op.batch_alter_table('hosts', schema=None) as batch_op:
        batch_op.drop_column('evacuation_id')
        batch_op.drop_column('heartbeat_at')
