"""placement: providers, inventories, traits, consumers, allocations

Revision ID: 0002
Revises:
Depends on: 0001
"""

import sqlalchemy as sa
from alembic import op


revision = '0002'
down_revision = None
branch_labels = ('placement',)
depends_on = '0001'


def upgrade() -> None:
    op.create_table('consumers',
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=255), nullable=False),
    sa.Column('user_id', sa.String(length=255), nullable=False),
    sa.Column('consumer_type', sa.String(length=255), nullable=False),
    sa.Column('generation', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('uuid', name=op.f('pk_consumers'))
    )
    op.create_index(op.f('ix_consumers_project_id'), 'consumers', ['project_id'], unique=False)
    op.create_table('resource_providers',
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('generation', sa.Integer(), nullable=False),
    sa.Column('parent_provider_uuid', sa.String(length=36), nullable=True),
    sa.Column('root_provider_uuid', sa.String(length=36), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['parent_provider_uuid'], ['resource_providers.uuid'], name=op.f('fk_resource_providers_parent_provider_uuid_resource_providers')),
    sa.PrimaryKeyConstraint('uuid', name=op.f('pk_resource_providers')),
    sa.UniqueConstraint('name', name=op.f('uq_resource_providers_name'))
    )
    op.create_index(op.f('ix_resource_providers_parent_provider_uuid'), 'resource_providers', ['parent_provider_uuid'], unique=False)
    op.create_index(op.f('ix_resource_providers_root_provider_uuid'), 'resource_providers', ['root_provider_uuid'], unique=False)
    op.create_table('traits',
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_traits'))
    )
    op.create_table('allocations',
    sa.Column('consumer_uuid', sa.String(length=36), nullable=False),
    sa.Column('resource_provider_uuid', sa.String(length=36), nullable=False),
    sa.Column('resource_class', sa.String(length=255), nullable=False),
    sa.Column('used', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['consumer_uuid'], ['consumers.uuid'], name=op.f('fk_allocations_consumer_uuid_consumers')),
    sa.ForeignKeyConstraint(['resource_provider_uuid'], ['resource_providers.uuid'], name=op.f('fk_allocations_resource_provider_uuid_resource_providers')),
    sa.PrimaryKeyConstraint('consumer_uuid', 'resource_provider_uuid', 'resource_class', name=op.f('pk_allocations'))
    )
    op.create_index('ix_allocations_provider_class', 'allocations', ['resource_provider_uuid', 'resource_class'], unique=False)
    op.create_table('inventories',
    sa.Column('resource_provider_uuid', sa.String(length=36), nullable=False),
    sa.Column('resource_class', sa.String(length=255), nullable=False),
    sa.Column('total', sa.Integer(), nullable=False),
    sa.Column('reserved', sa.Integer(), nullable=False),
    sa.Column('min_unit', sa.Integer(), nullable=False),
    sa.Column('max_unit', sa.Integer(), nullable=False),
    sa.Column('step_size', sa.Integer(), nullable=False),
    sa.Column('allocation_ratio', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['resource_provider_uuid'], ['resource_providers.uuid'], name=op.f('fk_inventories_resource_provider_uuid_resource_providers'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('resource_provider_uuid', 'resource_class', name=op.f('pk_inventories'))
    )
    op.create_table('provider_traits',
    sa.Column('resource_provider_uuid', sa.String(length=36), nullable=False),
    sa.Column('trait', sa.String(length=255), nullable=False),
    sa.ForeignKeyConstraint(['resource_provider_uuid'], ['resource_providers.uuid'], name=op.f('fk_provider_traits_resource_provider_uuid_resource_providers'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['trait'], ['traits.name'], name=op.f('fk_provider_traits_trait_traits')),
    sa.PrimaryKeyConstraint('resource_provider_uuid', 'trait', name=op.f('pk_provider_traits'))
    )
    op.create_index(op.f('ix_provider_traits_trait'), 'provider_traits', ['trait'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_provider_traits_trait'), table_name='provider_traits')
    op.drop_table('provider_traits')
    op.drop_table('inventories')
    op.drop_index('ix_allocations_provider_class', table_name='allocations')
    op.drop_table('allocations')
    op.drop_table('traits')
    op.drop_index(op.f('ix_resource_providers_root_provider_uuid'), table_name='resource_providers')
    op.drop_index(op.f('ix_resource_providers_parent_provider_uuid'), table_name='resource_providers')
    op.drop_table('resource_providers')
    op.drop_index(op.f('ix_consumers_project_id'), table_name='consumers')
    op.drop_table('consumers')
