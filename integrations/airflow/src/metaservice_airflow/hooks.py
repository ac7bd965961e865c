"""MetaServiceHook: the `metaservice` connection type (the server's URL and a bearer token)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from spark_client._http import MetaServiceClient

DEFAULT_CONN_ID = "metaservice_default"


class MetaServiceHook(BaseHook):
    """A MetaService server, from an Airflow connection of type `metaservice`.

    The connection's host is the server's URL (`http://metaservice:8080`; a host without a scheme gets
    `http://`, and the connection's port is added when the host names none) and its password is the bearer
    token (empty: no token, for a server without auth).

    Example:
        AIRFLOW_CONN_METASERVICE_DEFAULT='{"conn_type": "metaservice", "host": "http://metaservice:8080",
                                            "password": "<reader token>"}'

        with MetaServiceHook().get_client() as client:
            versions = client.versions(["lake.mart.a", "lake.mart.b"])
    """

    conn_name_attr = "metaservice_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "metaservice"
    hook_name = "MetaService"

    def __init__(self, metaservice_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.metaservice_conn_id = metaservice_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: a URL and a token, nothing else."""
        return {
            "hidden_fields": ["schema", "login", "extra"],
            "relabeling": {"host": "URL", "password": "Token"},
            "placeholders": {"host": "http://metaservice:8080", "password": "bearer token (empty: no auth)"},
        }

    def get_url_and_token(self) -> tuple[str, str | None]:
        """The server's base URL and the token, from the connection."""
        return url_and_token(self.get_connection(self.metaservice_conn_id))

    def get_client(self, **kwargs: Any) -> MetaServiceClient:
        """A `MetaServiceClient` for the connection (keyword arguments go to it: retry, timeout)."""
        url, token = self.get_url_and_token()
        return MetaServiceClient(url, token or "", **kwargs)

    def test_connection(self) -> tuple[bool, str]:
        """The UI's Test button: whether the server answers /readyz."""
        try:
            with self.get_client() as client:
                ok = client.health()
        except Exception as exc:
            return False, str(exc)
        return ok, "MetaService is ready" if ok else "MetaService did not answer /readyz with 200"


def url_and_token(conn: Any) -> tuple[str, str | None]:
    """The base URL and token of a `metaservice` connection object."""
    host = (conn.host or "").strip()
    if not host:
        raise ValueError(f"connection {conn.conn_id!r}: the host must be the MetaService URL, e.g. http://host:8080")
    if "://" not in host:
        host = f"http://{host}"
    scheme, rest = host.split("://", 1)
    authority = rest.split("/", 1)[0]
    if conn.port and ":" not in authority.rsplit("]", 1)[-1]:
        path = rest[len(authority) :]
        host = f"{scheme}://{authority}:{conn.port}{path}"
    return host.rstrip("/"), conn.password or None
