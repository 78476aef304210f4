"""The adapter's errors: HvdShimError, and the engine's statuses turned into
exceptions (a change of ranks is MembershipChanged where the adapter follows
changes of ranks, HVDSHIM_ELASTIC, and the end of the job elsewhere)."""
from . import capi

following = False  # hvd_elastic_follow was called: a change of ranks raises MembershipChanged (elastic.follow)


class HvdShimError(RuntimeError):
    """Raised on every rank when the job cannot go on correctly."""


class MembershipChanged(HvdShimError):
    """An operation failed because ranks died (HVDSHIM_ELASTIC, the adapter
    following the change): the caller takes the change in (elastic.recover)
    and submits again over the ranks left."""


def died(what):
    """The engine's line for an operation the ranks' change failed, cut to
    what happened: "rank(s) 1 died (...) while averaging ..."."""
    cause = capi.last_error().split("cannot complete: ", 1)[-1]
    cause = cause.split("; the job goes on")[0]
    return "%s while %s" % (cause, what)


def membership_error(what):
    if following:
        return MembershipChanged("hvdshim: %s" % died(what))
    return HvdShimError("hvdshim: %s; this script does not follow changes of ranks (HVDSHIM_ELASTIC is off): "
                        "ending the job" % died(what))


def check(status, what):
    if status == capi.ERR_MEMBERSHIP:
        raise membership_error(what)
    if status != 0:
        detail = capi.last_error()
        raise HvdShimError("hvdshim: %s failed: %s" % (what, detail or "status %d" % status))
