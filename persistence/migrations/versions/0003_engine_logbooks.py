"""engine: TaskFlow logbooks, flow details and atom details (tf_ tables)

Revision ID: 0003
Revises:
Depends on: 0001
"""

import sqlalchemy as sa
from alembic import op


revision = '0003'
down_revision = None
branch_labels = ('engine',)
depends_on = '0001'


def upgrade() -> None:
    op.create_table('tf_logbooks',
    sa.Column('uuid', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('meta', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('uuid', name=op.f('pk_tf_logbooks'))
    )
    op.create_table('tf_flowdetails',
    sa.Column('uuid', sa.String(length=64), nullable=False),
    sa.Column('parent_uuid', sa.String(length=64), nullable=True),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('state', sa.String(length=255), nullable=True),
    sa.Column('meta', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['parent_uuid'], ['tf_logbooks.uuid'],
                            name=op.f('fk_tf_flowdetails_parent_uuid_tf_logbooks'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('uuid', name=op.f('pk_tf_flowdetails'))
    )
    op.create_index(op.f('ix_tf_flowdetails_parent_uuid'), 'tf_flowdetails', ['parent_uuid'],
                    unique=False)
    op.create_table('tf_atomdetails',
    sa.Column('uuid', sa.String(length=64), nullable=False),
    sa.Column('parent_uuid', sa.String(length=64), nullable=True),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('atom_type', sa.String(length=32), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=True),
    sa.Column('state', sa.String(length=255), nullable=True),
    sa.Column('intention', sa.String(length=32), nullable=True),
    sa.Column('meta', sa.Text(), nullable=True),
    sa.Column('failure', sa.Text(), nullable=True),
    sa.Column('results', sa.Text(), nullable=True),
    sa.Column('revert_results', sa.Text(), nullable=True),
    sa.Column('revert_failure', sa.Text(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['parent_uuid'], ['tf_flowdetails.uuid'],
                            name=op.f('fk_tf_atomdetails_parent_uuid_tf_flowdetails'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('uuid', name=op.f('pk_tf_atomdetails'))
    )
    op.create_index(op.f('ix_tf_atomdetails_parent_uuid'), 'tf_atomdetails', ['parent_uuid'],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_tf_atomdetails_parent_uuid'), table_name='tf_atomdetails')
    op.drop_table('tf_atomdetails')
    op.drop_index(op.f('ix_tf_flowdetails_parent_uuid'), table_name='tf_flowdetails')
    op.drop_table('tf_flowdetails')
    op.drop_table('tf_logbooks')
