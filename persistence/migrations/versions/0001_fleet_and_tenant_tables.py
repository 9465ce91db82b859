"""fleet and tenant tables

Revision ID: 0001
Revises: 
"""

import sqlalchemy as sa
from alembic import op


revision = '0001'
down_revision = None
branch_labels = ('fleet',)
depends_on = None


def upgrade() -> None:
    op.create_table('fences',
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('token', sa.Integer(), nullable=False),
    sa.Column('owner', sa.String(length=255), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_fences'))
    )
    op.create_table('flavors',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('vcpus', sa.Integer(), nullable=False),
    sa.Column('ram_mb', sa.Integer(), nullable=False),
    sa.Column('disk_gb', sa.Integer(), nullable=False),
    sa.Column('extra_specs', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_flavors')),
    sa.UniqueConstraint('name', name=op.f('uq_flavors_name'))
    )
    op.create_table('hosts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('region', sa.String(length=64), nullable=False),
    sa.Column('zone', sa.String(length=64), nullable=False),
    sa.Column('rack', sa.String(length=64), nullable=False),
    sa.Column('inventory', sa.JSON(), nullable=False),
    sa.Column('capabilities', sa.JSON(), nullable=False),
    sa.Column('traits', sa.JSON(), nullable=False),
    sa.Column('compute_agent', sa.String(length=255), nullable=True),
    sa.Column('build_failures', sa.Integer(), nullable=False),
    sa.Column('last_build_failure_at', sa.DateTime(), nullable=True),
    sa.Column('state_reason', sa.String(length=255), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hosts')),
    sa.UniqueConstraint('name', name=op.f('uq_hosts_name')),
    sa.UniqueConstraint('uuid', name=op.f('uq_hosts_uuid'))
    )
    with op.batch_alter_table('hosts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_hosts_region'), ['region'], unique=False)

    op.create_table('images',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('min_disk_gb', sa.Integer(), nullable=False),
    sa.Column('min_ram_mb', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_images')),
    sa.UniqueConstraint('name', name=op.f('uq_images_name'))
    )
    op.create_table('quotas',
    sa.Column('tenant_id', sa.String(length=64), nullable=False),
    sa.Column('instances', sa.Integer(), nullable=False),
    sa.Column('vcpus', sa.Integer(), nullable=False),
    sa.Column('ram_mb', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('tenant_id', name=op.f('pk_quotas'))
    )
    op.create_table('reservations',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.String(length=64), nullable=True),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('policy', sa.String(length=16), nullable=False),
    sa.Column('request', sa.JSON(), nullable=False),
    sa.Column('flow_id', sa.String(length=36), nullable=True),
    sa.Column('fault', sa.JSON(), nullable=True),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_reservations')),
    sa.UniqueConstraint('tenant_id', 'idempotency_key', name=op.f('uq_reservations_tenant_id'))
    )
    with op.batch_alter_table('reservations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_reservations_flow_id'), ['flow_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_reservations_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_reservations_tenant_id'), ['tenant_id'], unique=False)

    op.create_table('server_groups',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('policies', sa.JSON(), nullable=False),
    sa.Column('scope', sa.String(length=16), nullable=False),
    sa.Column('max_per_host', sa.Integer(), nullable=True),
    sa.Column('capabilities', sa.JSON(), nullable=False),
    sa.Column('metadata', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_server_groups'))
    )
    with op.batch_alter_table('server_groups', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_server_groups_tenant_id'), ['tenant_id'], unique=False)

    op.create_table('storage_backends',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('scope', sa.String(length=16), nullable=False),
    sa.Column('region', sa.String(length=64), nullable=False),
    sa.Column('zone', sa.String(length=64), nullable=False),
    sa.Column('rack', sa.String(length=64), nullable=False),
    sa.Column('host_name', sa.String(length=255), nullable=True),
    sa.Column('capacity_gb', sa.Integer(), nullable=False),
    sa.Column('volume_types', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_storage_backends')),
    sa.UniqueConstraint('name', name=op.f('uq_storage_backends_name')),
    sa.UniqueConstraint('uuid', name=op.f('uq_storage_backends_uuid'))
    )
    op.create_table('volumes',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('size_gb', sa.Integer(), nullable=False),
    sa.Column('volume_type', sa.String(length=64), nullable=True),
    sa.Column('backend', sa.String(length=255), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('instance_id', sa.String(length=36), nullable=True),
    sa.Column('reservation_id', sa.String(length=36), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_volumes'))
    )
    with op.batch_alter_table('volumes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_volumes_instance_id'), ['instance_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_volumes_reservation_id'), ['reservation_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_volumes_tenant_id'), ['tenant_id'], unique=False)

    op.create_table('instances',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('reservation_id', sa.String(length=36), nullable=True),
    sa.Column('tenant_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('task_state', sa.String(length=32), nullable=True),
    sa.Column('flavor_id', sa.String(length=36), nullable=False),
    sa.Column('image_id', sa.String(length=36), nullable=False),
    sa.Column('group_id', sa.String(length=36), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('hosts_tried', sa.JSON(), nullable=False),
    sa.Column('fault', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['reservation_id'], ['reservations.id'], name=op.f('fk_instances_reservation_id_reservations')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_instances'))
    )
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_instances_host'), ['host'], unique=False)
        batch_op.create_index(batch_op.f('ix_instances_reservation_id'), ['reservation_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_instances_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_instances_tenant_id'), ['tenant_id'], unique=False)

    op.create_table('server_group_members',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('group_id', sa.String(length=36), nullable=False),
    sa.Column('instance_id', sa.String(length=36), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=True),
    sa.ForeignKeyConstraint(['group_id'], ['server_groups.id'], name=op.f('fk_server_group_members_group_id_server_groups'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_server_group_members')),
    sa.UniqueConstraint('group_id', 'instance_id', name=op.f('uq_server_group_members_group_id'))
    )
    with op.batch_alter_table('server_group_members', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_server_group_members_instance_id'), ['instance_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('server_group_members', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_server_group_members_instance_id'))

    op.drop_table('server_group_members')
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_instances_tenant_id'))
        batch_op.drop_index(batch_op.f('ix_instances_status'))
        batch_op.drop_index(batch_op.f('ix_instances_reservation_id'))
        batch_op.drop_index(batch_op.f('ix_instances_host'))

    op.drop_table('instances')
    with op.batch_alter_table('volumes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_volumes_tenant_id'))
        batch_op.drop_index(batch_op.f('ix_volumes_reservation_id'))
        batch_op.drop_index(batch_op.f('ix_volumes_instance_id'))

    op.drop_table('volumes')
    op.drop_table('storage_backends')
    with op.batch_alter_table('server_groups', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_server_groups_tenant_id'))

    op.drop_table('server_groups')
    with op.batch_alter_table('reservations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_reservations_tenant_id'))
        batch_op.drop_index(batch_op.f('ix_reservations_status'))
        batch_op.drop_index(batch_op.f('ix_reservations_flow_id'))

    op.drop_table('reservations')
    op.drop_table('quotas')
    op.drop_table('images')
    with op.batch_alter_table('hosts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_hosts_region'))

    op.drop_table('hosts')
    op.drop_table('flavors')
    op.drop_table('fences')
