"""virtual clusters: clusters, members, groupings; volume faults; volume quotas

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'vclusters',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('tenant_id', sa.String(length=64), nullable=False),
        sa.Column('user_id', sa.String(length=64), nullable=True),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('request', sa.JSON(), nullable=False),
        sa.Column('flow_id', sa.String(length=36), nullable=True),
        sa.Column('runs', sa.JSON(), nullable=False),
        sa.Column('fault', sa.JSON(), nullable=True),
        sa.Column('idempotency_key', sa.String(length=255), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_vclusters')),
        sa.UniqueConstraint('tenant_id', 'idempotency_key',
                            name=op.f('uq_vclusters_tenant_id')),
    )
    with op.batch_alter_table('vclusters', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_vclusters_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_vclusters_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_vclusters_flow_id'), ['flow_id'], unique=False)
    op.create_table(
        'vcluster_members',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('vcluster_id', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('kind', sa.String(length=8), nullable=False),
        sa.Column('index', sa.Integer(), nullable=False),
        sa.Column('resource_id', sa.String(length=36), nullable=False),
        sa.Column('spec', sa.JSON(), nullable=False),
        sa.Column('attach_to', sa.String(length=255), nullable=True),
        sa.Column('added_by', sa.String(length=36), nullable=True),
        sa.Column('removing', sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(['vcluster_id'], ['vclusters.id'],
                                name=op.f('fk_vcluster_members_vcluster_id_vclusters'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_vcluster_members')),
        sa.UniqueConstraint('vcluster_id', 'name', name=op.f('uq_vcluster_members_vcluster_id')),
        sa.UniqueConstraint('vcluster_id', 'kind', 'index',
                            name=op.f('uq_vcluster_members_vcluster_id_kind')),
        sa.UniqueConstraint('resource_id', name=op.f('uq_vcluster_members_resource_id')),
    )
    with op.batch_alter_table('vcluster_members', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_vcluster_members_vcluster_id'), ['vcluster_id'],
                              unique=False)
    op.create_table(
        'vcluster_groupings',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('vcluster_id', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('rule', sa.String(length=16), nullable=False),
        sa.Column('scope', sa.String(length=16), nullable=True),
        sa.Column('members', sa.JSON(), nullable=False),
        sa.Column('server_group_id', sa.String(length=36), nullable=True),
        sa.ForeignKeyConstraint(['vcluster_id'], ['vclusters.id'],
                                name=op.f('fk_vcluster_groupings_vcluster_id_vclusters'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_vcluster_groupings')),
        sa.UniqueConstraint('vcluster_id', 'name',
                            name=op.f('uq_vcluster_groupings_vcluster_id')),
    )
    with op.batch_alter_table('vcluster_groupings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_vcluster_groupings_vcluster_id'), ['vcluster_id'],
                              unique=False)
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('vcluster_id', sa.String(length=36), nullable=True))
        batch_op.create_index(batch_op.f('ix_instances_vcluster_id'), ['vcluster_id'],
                              unique=False)
    with op.batch_alter_table('volumes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('vcluster_id', sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column('fault', sa.JSON(), nullable=True))
        batch_op.create_index(batch_op.f('ix_volumes_vcluster_id'), ['vcluster_id'],
                              unique=False)
    with op.batch_alter_table('server_groups', schema=None) as batch_op:
        batch_op.add_column(sa.Column('vcluster_id', sa.String(length=36), nullable=True))
        batch_op.create_index(batch_op.f('ix_server_groups_vcluster_id'), ['vcluster_id'],
                              unique=False)
    with op.batch_alter_table('quotas', schema=None) as batch_op:
        batch_op.add_column(sa.Column('volumes', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('gigabytes', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('quotas', schema=None) as batch_op:
        batch_op.drop_column('gigabytes')
        batch_op.drop_column('volumes')
    with op.batch_alter_table('server_groups', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_server_groups_vcluster_id'))
        batch_op.drop_column('vcluster_id')
    with op.batch_alter_table('volumes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_volumes_vcluster_id'))
        batch_op.drop_column('fault')
        batch_op.drop_column('vcluster_id')
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_instances_vcluster_id'))
        batch_op.drop_column('vcluster_id')
    op.drop_table('vcluster_groupings')
    op.drop_table('vcluster_members')
    op.drop_table('vclusters')
