"""horovod.common as hvdshim serves it: exceptions and process sets."""
