"""Horovod's exception types."""


class HorovodInternalError(RuntimeError):
    """A collective failed: ranks disagree on a tensor, a rank has shut down
    or died, or MPI failed.  Raised on every rank that takes part; inside a
    function decorated with hvd.elastic.run, a reset event (the state is
    restored to its last commit)."""


class HostsUpdatedInterrupt(RuntimeError):
    """Hosts joined (hvdrun --host-discovery-script): raised on every rank at
    the same State.commit() or check_host_updates(); inside hvd.elastic.run,
    a reset event without a restore.  skip_sync: the hosts were only
    removed."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


def get_version_mismatch_message(name, version, installed_version):
    return ("Framework %s installed with version %s but found version %s; hvdshim's Horovod API needs no "
            "rebuild" % (name, installed_version, version))
