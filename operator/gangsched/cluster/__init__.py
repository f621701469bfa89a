"""What gangsched believes about the cluster, and how it checks.

store        one store of every kind (reflector-style apply, remove, replace; which kinds are stale)
kinds        the one table of kinds: where each is served, what it is for, how it is parsed
discovery    which version of each kind the API serves
assumptions  the one overlay: bindings and gang joins decided but not yet seen
writes       our writes per group, and whether the cache has seen them (KEP-5647)
devices      the DRA layer: assumed allocations, devices held back
indexes      members, pods by scheduler, owner chains, which PodGroup of a name is scheduled
snapshots    per node what its pods request, and the loop's snapshot kept up to date
cache        all of it composed: `ClusterCache`, what the loop and the commands read
informer     list+watch of one kind into the cache, as client-go's reflector
wire         the informers' decoding (msgspec, Pods and Nodes projected)
read         one look at the live cluster, for the look-only commands
live         live reads next to the cache: priming, catching up when the watch lags, finished pods
"""

from typing import TYPE_CHECKING, Any

from gangsched.cluster.versions import parse_rv
from gangsched.model import Key

if TYPE_CHECKING:
    from gangsched.cluster.cache import ClusterCache
    from gangsched.cluster.live import LiveReader

__all__ = ["ClusterCache", "Key", "LiveReader", "parse_rv"]


def __getattr__(name: str) -> Any:
    """`ClusterCache` and `LiveReader` are imported when first asked for: the table of kinds
    (`cluster.kinds`) is read by `simulate`, which needs neither the cache nor the HTTP client
    (importing them cost `gangsched simulate` 0.4 s of its start)."""
    if name == "ClusterCache":
        from gangsched.cluster.cache import ClusterCache

        return ClusterCache
    if name == "LiveReader":
        from gangsched.cluster.live import LiveReader

        return LiveReader
    raise AttributeError(name)
