"""jobs table of the embedded jobboard

Revision ID: 0004
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = None
branch_labels = ('jobs',)
depends_on = '0001'


def upgrade() -> None:
    op.create_table(
        'jobs',
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('board', sa.String(length=64), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('sequence', sa.BigInteger(), nullable=False),
        sa.Column('priority', sa.String(length=16), nullable=False),
        sa.Column('details', sa.JSON(), nullable=False),
        sa.Column('book_uuid', sa.String(length=36), nullable=True),
        sa.Column('book_name', sa.String(length=255), nullable=True),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('owner', sa.String(length=255), nullable=True),
        sa.Column('claim_expires_at', sa.DateTime(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('uuid', name=op.f('pk_jobs')),
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_board_state_sequence',
                              ['board', 'state', 'sequence'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_name'), ['name'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_name'))
        batch_op.drop_index('ix_jobs_board_state_sequence')
    op.drop_table('jobs')
