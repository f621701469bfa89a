"""What gangsched believes about the cluster, and how it checks.

store        one store of every watched kind (reflector-style apply, remove, replace; sync)
kinds        the kinds it holds: how each is parsed, what of it counts as a change
assumptions  bindings decided but not yet seen
writes       our writes per group, and whether the cache has seen them (KEP-5647)
devices      the DRA layer: assumed allocations, devices held back
cache        the three composed: `ClusterCache`, what the loop and the commands read
informer     list+watch of one kind into the cache, as client-go's reflector
live         live reads next to the cache: priming, catching up when the watch lags, finished pods
"""

from gangsched.cluster.cache import ClusterCache
from gangsched.cluster.live import LiveReader
from gangsched.cluster.versions import parse_rv
from gangsched.model import Key

__all__ = ["ClusterCache", "Key", "LiveReader", "parse_rv"]
