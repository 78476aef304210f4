"""horovod.torch.elastic is not served by hvdshim: using it says so."""

_WHY = ("elastic Horovod (hvd.elastic) is not served by hvdshim: run the script with a fixed number of ranks "
        "under hvdrun or mpirun and resume from its own checkpoints after a failure")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError("horovod.torch.elastic.%s: %s" % (name, _WHY))
