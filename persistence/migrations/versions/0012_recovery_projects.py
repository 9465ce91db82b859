"""automatic host recovery: an administrator's per-project choice of servers

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'recovery_projects',
        sa.Column('project_id', sa.String(length=64), nullable=False),
        sa.Column('servers', sa.String(length=8), nullable=False),
        sa.Column('reason', sa.String(length=255), nullable=True),
        sa.Column('user_id', sa.String(length=64), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('project_id', name=op.f('pk_recovery_projects')),
    )


def downgrade() -> None:
    op.drop_table('recovery_projects')
