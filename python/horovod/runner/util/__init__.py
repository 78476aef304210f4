"""Helpers of Horovod's launcher that scripts import."""
