"""One sensor tick as Dagster's sensor daemon makes it, on a real instance: evaluate the sensor with the stored
cursor, skip each run request whose run key already has a run of this sensor (the daemon's check,
`dagster._daemon.sensor.fetch_existing_runs`), launch the others with the daemon's tags, then store the cursor.
The steps are separate so that a test can stop between them, as a killed daemon would."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dagster import DagsterInstance, RunRequest, RunsFilter, SensorDefinition, SkipReason, build_sensor_context
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG


@dataclass
class Tick:
    requests: list[RunRequest]
    cursor: str | None
    skip: str | None
    launched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def evaluate(
    sensor: SensorDefinition, instance: DagsterInstance, cursor: str | None, resources: dict[str, Any]
) -> Tick:
    context = build_sensor_context(instance=instance, cursor=cursor, resources=resources, sensor_name=sensor.name)
    result = sensor.evaluate_tick(context)
    skip = result.skip_message
    return Tick(list(result.run_requests or []), result.cursor if result.cursor is not None else cursor, skip)


def launch(
    tick: Tick, sensor: SensorDefinition, instance: DagsterInstance, job: Any, resources: dict[str, Any]
) -> Tick:
    for request in tick.requests:
        assert request.run_key
        existing = instance.get_runs(filters=RunsFilter(tags={RUN_KEY_TAG: request.run_key}))
        if any(run.tags.get(SENSOR_NAME_TAG) == sensor.name for run in existing):
            tick.skipped.append(request.run_key)
            continue
        tags = {**request.tags, RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: sensor.name}
        result = job.execute_in_process(
            run_config=request.run_config, instance=instance, tags=tags, resources=resources
        )
        assert result.success
        tick.launched.append(request.run_key)
    return tick


def runs_of(instance: DagsterInstance, sensor: SensorDefinition) -> list[Any]:
    return [run for run in instance.get_runs() if run.tags.get(SENSOR_NAME_TAG) == sensor.name]


__all__ = ["SkipReason", "Tick", "evaluate", "launch", "runs_of"]
