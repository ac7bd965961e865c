"""A triggerer for one MetaServiceConsistencyTrigger in its own process, killable with SIGKILL.

What Airflow's triggerer does for an asset watcher, on the same interfaces: it inflates the trigger from its
serialized kwargs, injects the watched asset's state store (`AssetStateStoreAccessors`, talking to the metadata
database through Airflow's execution API, here its in-process server), runs `trigger.run()` and hands each event
on; here an event is written to stdout as one JSON line (standing for the asset event the triggerer records).

Usage: python trigger_runner.py ASSET_NAME ASSET_URI '<trigger kwargs as JSON>'
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any


def main(asset_name: str, asset_uri: str, kwargs: dict[str, Any]) -> None:
    import psutil
    import structlog
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors
    from airflow.sdk.execution_time.supervisor import (
        InProcessSupervisorComms,
        InProcessTestSupervisor,
        set_supervisor_comms,
    )
    from metaservice_airflow.triggers import MetaServiceConsistencyTrigger

    class Comms(InProcessSupervisorComms):  # type: ignore[misc]
        """The in-process comms, with the async entry point the triggerer's comms have."""

        async def asend(self, msg: Any) -> Any:
            return self.send(msg)

    supervisor = InProcessTestSupervisor(
        id=uuid.uuid4(),
        pid=os.getpid(),
        process=psutil.Process(),
        process_log=structlog.get_logger(logger_name="trigger_runner").bind(),
        client=InProcessTestSupervisor._api_client(),
    )
    supervisor.comms = Comms(supervisor=supervisor)
    trigger = MetaServiceConsistencyTrigger(**kwargs)
    trigger.asset_state_store = AssetStateStoreAccessors(inlets=[Asset(name=asset_name, uri=asset_uri)])

    async def run() -> None:
        async for event in trigger.run():
            print(json.dumps(event.payload), flush=True)

    with set_supervisor_comms(supervisor.comms):
        asyncio.run(run())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
