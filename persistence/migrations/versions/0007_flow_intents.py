"""flow intents (the outbox of submissions), reconcile leases, flow details by state

Revision ID: 0007
Revises: 0006
Depends on: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = '0003'


def upgrade() -> None:
    op.create_table(
        'flow_intents',
        sa.Column('flow_id', sa.String(length=64), nullable=False),
        sa.Column('board', sa.String(length=64), nullable=False),
        sa.Column('flow_name', sa.String(length=255), nullable=False),
        sa.Column('flow_module', sa.String(length=255), nullable=False),
        sa.Column('flow_kwargs', sa.JSON(), nullable=False),
        sa.Column('store', sa.JSON(), nullable=False),
        sa.Column('owner_tenant', sa.String(length=64), nullable=True),
        sa.Column('on_error', sa.String(length=16), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('materialized_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('flow_id', name=op.f('pk_flow_intents')),
    )
    with op.batch_alter_table('flow_intents', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_flow_intents_materialized_at'),
                              ['materialized_at'], unique=False)
    op.create_table(
        'reconcile_leases',
        sa.Column('board', sa.String(length=64), nullable=False),
        sa.Column('owner', sa.String(length=255), nullable=False),
        sa.Column('expires_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('board', name=op.f('pk_reconcile_leases')),
    )
    # The reconciler's one query: the flows that are not finished.
    with op.batch_alter_table('tf_flowdetails', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tf_flowdetails_state'), ['state'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('tf_flowdetails', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tf_flowdetails_state'))
    op.drop_table('reconcile_leases')
    with op.batch_alter_table('flow_intents', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_flow_intents_materialized_at'))
    op.drop_table('flow_intents')
