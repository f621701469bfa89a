"""Which version of each kind of the table the API serves: one discovery GET per group/version.

A kind lists its versions newest first; the first one the API serves is the one watched and
listed (`Kind.path(version)`). Kinds served always (the core kinds) are not asked about. The
operator asks at startup and again, for what was not served, every few seconds (a CRD
installed later is picked up); the look-only commands ask once per run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gangsched.cluster.store import Kind, Served
from gangsched.session import ApiError, Get, served_resources


@dataclass(slots=True)
class Discovered:
    """What one round of discovery found: the version served per kind name (kinds not served
    are absent); per group/version the API refused to answer, why (not a 404: a 403, a 500);
    and, when the API could not be reached at all, why (the round stops there), so that the
    caller can say so or ask again later."""

    served: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    unreachable: str | None = None


async def discover(
    get: Get, kinds: Iterable[Kind[Any]], known: Mapping[str, set[str]] | None = None
) -> Discovered:
    """The versions served of `kinds` (those `Served.ALWAYS` are served at their newest
    version without asking). `known`: group/version -> its resources, already asked (kept by
    a caller that asks again and again); what this round asks is added to it when it is a dict."""
    found = Discovered()
    resources: dict[str, set[str] | None] = dict(known or {})
    for kind in kinds:
        if kind.served is Served.ALWAYS:
            found.served[kind.name] = kind.versions[0]
            continue
        for version in kind.versions:
            group_version = kind.api_version(version)
            if group_version not in resources:
                try:
                    resources[group_version] = await served_resources(get, group_version)
                except ApiError as exc:
                    found.failed[group_version] = f"{exc.status}: {exc.message}"
                    resources[group_version] = None
                except Exception as exc:  # no answer at all: asking on is pointless
                    found.unreachable = f"{type(exc).__name__}: {exc}"
                    return found
            names = resources[group_version]
            if names is not None and kind.plural in names:
                found.served[kind.name] = version
                break
    if isinstance(known, dict):
        known.update({gv: names for gv, names in resources.items() if names is not None})
    return found
