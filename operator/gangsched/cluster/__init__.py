"""What gangsched believes about the cluster, and how it checks.

cache  the watch-fed cache: small projections of pods, nodes, PodGroups and PriorityClasses,
       assumptions for bindings in flight, resourceVersions of our own writes
live   live reads next to the cache: priming, catching up when the watch lags, finished pods
"""

from gangsched.cluster.cache import ClusterCache
from gangsched.cluster.live import LiveReader
from gangsched.cluster.versions import parse_rv
from gangsched.model import Key

__all__ = ["ClusterCache", "Key", "LiveReader", "parse_rv"]
