"""placement: custom resource classes and provider aggregates

Revision ID: 0008
Revises: 0002 (the placement branch)
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'resource_classes',
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_resource_classes')),
    )
    op.create_table(
        'provider_aggregates',
        sa.Column('resource_provider_uuid', sa.String(length=36), nullable=False),
        sa.Column('aggregate_uuid', sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(['resource_provider_uuid'], ['resource_providers.uuid'],
                                name=op.f('fk_provider_aggregates_resource_provider_uuid_resource_providers'),  # noqa: E501
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('resource_provider_uuid', 'aggregate_uuid',
                                name=op.f('pk_provider_aggregates')),
    )
    with op.batch_alter_table('provider_aggregates', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_provider_aggregates_aggregate_uuid'),
                              ['aggregate_uuid'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('provider_aggregates', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_provider_aggregates_aggregate_uuid'))
    op.drop_table('provider_aggregates')
    op.drop_table('resource_classes')
