"""Horovod's exception types."""


class HorovodInternalError(RuntimeError):
    """A collective failed: ranks disagree on a tensor, a rank has shut down
    or died, or MPI failed.  Raised on every rank that takes part."""


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic Horovod's signal that the hosts changed (never raised here:
    hvdshim does not serve elastic training)."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


def get_version_mismatch_message(name, version, installed_version):
    return ("Framework %s installed with version %s but found version %s; hvdshim's Horovod API needs no "
            "rebuild" % (name, installed_version, version))
