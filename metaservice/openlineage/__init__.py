"""OpenLineage in and out.

- In (`ingest`): `POST /api/v1/lineage` takes the events OpenLineage producers send; a run's or job's input and
  output datasets register the job's sources and sinks through the registry, all of an event's edges in one
  transaction. Datasets become tables through `mapping`.
- Out (`emitter`): with `METASERVICE_OPENLINEAGE_URL` set, every barrier run that ends (committed or aborted) is
  sent to that endpoint as a RunEvent by a background task, from a bounded in-memory queue, so that sending
  never slows or fails the protocol.
"""
