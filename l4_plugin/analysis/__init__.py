"""The pure analysis core: cross-job filtering, spatial, silence, temporal and fusion estimators.

Every estimator takes numpy arrays or the records of :mod:`l4_plugin.analysis.results` and returns
those records; none touches the cluster or the disk.
"""
