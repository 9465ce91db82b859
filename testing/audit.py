"""The strict audit as a test assertion."""

from __future__ import annotations


def assert_audit_clean(database, placement_client, compute_api, **audit_kwargs):
    """Run the strict audit; raise AssertionError listing every mismatch.

    Call it once every flow has settled, at the end of a flow, crash or revert
    test: nothing claimed, built or attached may be left that the records do
    not account for. Returns the report (its ``counts`` say how much was
    looked at).
    """
    from fleetflow.services.audit.report import audit

    audit_kwargs.setdefault("strict", True)
    report = audit(database, placement_client, compute_api, **audit_kwargs)
    if not report.clean:
        raise AssertionError("the audit is not clean: " + report.summary())
    return report
