"""Push the dashboards to a Grafana over its HTTP API (``grafana-client``).

Two calls: ``POST /api/folders`` (an existing folder, 409/412, is fine) and
``POST /api/dashboards/db`` with ``overwrite``, so provisioning is idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FOLDER_UID = "nightjar-ray"
FOLDER_TITLE = "nightjar-ray"
EXISTS_STATUS = (409, 412)


@dataclass(frozen=True)
class ProvisionResult:
    """What Grafana answered for one dashboard."""

    uid: str
    url: str
    version: int


def _ensure_folder(api: Any, errors: Any) -> None:
    try:
        api.folder.create_folder(FOLDER_TITLE, uid=FOLDER_UID)
    except errors.GrafanaClientError as e:
        if e.status_code not in EXISTS_STATUS:
            raise


def provision(
    url: str, dashboards: list[dict[str, Any]], credential: str | tuple[str, str] | None = None
) -> list[ProvisionResult]:
    """Create or overwrite ``dashboards`` in Grafana at ``url`` (folder ``nightjar-ray``).

    ``credential`` is an API token or ``(user, password)``; ``None`` takes them from the
    URL (``http://user:pass@host:3000``). Raises ``grafana_client`` errors on failure.
    """
    from grafana_client import client as errors
    from grafana_client.api import GrafanaApi

    api = GrafanaApi.from_url(url, credential=credential)
    _ensure_folder(api, errors)
    results = []
    for dashboard in dashboards:
        answer = api.dashboard.update_dashboard(
            {
                "dashboard": {**dashboard, "id": None},
                "folderUid": FOLDER_UID,
                "overwrite": True,
                "message": "nightjar-ray dashboards provision",
            }
        )
        results.append(
            ProvisionResult(str(answer["uid"]), str(answer["url"]), int(answer["version"]))
        )
    return results
