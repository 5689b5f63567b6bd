"""Whether the judge jobs can reach the judge's endpoint: under a cluster executor they run on
compute nodes, where a local-only address (localhost, 127.x, ::1) is the node itself, not the
machine serving the judge. Checked at parse time, so such a run stops before any job."""

from __future__ import annotations

from ipaddress import ip_address
from urllib.parse import urlsplit

LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def local_only(endpoint: str) -> bool:
    """Whether `endpoint` (a URL) names this machine only. Not a URL (`embedded`: mmspec's own
    server, which each judge job starts where it runs): False."""
    host = urlsplit(endpoint).hostname
    if host is None:
        return False
    if host in LOCAL_NAMES:
        return True
    try:
        address = ip_address(host)
    except ValueError:
        return False  # a host name: the nodes resolve it
    return address.is_loopback or address.is_unspecified


def check_reachable(endpoint: str, judged: list[str], local_execution: bool) -> None:
    """ValueError when judge jobs of the datasets `judged` would run on other machines
    (`local_execution` False: a cluster executor) against a local-only `endpoint`."""
    if local_execution or not judged or not local_only(endpoint):
        return
    raise ValueError(
        f"judge.endpoint {endpoint} is reachable on this machine only, but a cluster executor "
        f"runs the judge jobs of {', '.join(sorted(judged))} on compute nodes, where it names the "
        "node itself. Serve the judge where the nodes reach it (e.g. as a Slurm job of its own: "
        "docs/running-at-scale.md, 'A judge the jobs can reach') and pass its address: --config "
        '"judge={endpoint: http://<host>:<port>/v1, model: <name>}"; or run without the '
        "cluster executor; or use the embedded judge (endpoint: embedded, the toy world's)."
    )
