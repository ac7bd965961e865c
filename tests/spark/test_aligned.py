"""`_writes.aligned`, the one place a frame is fitted to a table's columns before any format writes it."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from spark_client.catalog._writes import aligned
from spark_client.modes import Merge

SCHEMA = StructType([StructField("id", LongType()), StructField("name", StringType())])


def test_a_frame_with_the_tables_columns_is_written_as_it_is(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1, "a")], SCHEMA)
    assert aligned(df, SCHEMA) is df  # no projection: nothing for Spark to analyse again


def test_columns_are_put_in_the_tables_order_and_missing_ones_are_null(spark: SparkSession) -> None:
    df = spark.createDataFrame([("a", 1)], StructType([SCHEMA.fields[1], SCHEMA.fields[0]]))
    assert [tuple(r) for r in aligned(df, SCHEMA).collect()] == [(1, "a")]
    only_id = spark.createDataFrame([(2,)], StructType([SCHEMA.fields[0]]))
    assert [tuple(r) for r in aligned(only_id, SCHEMA).collect()] == [(2, None)]


def test_a_merge_delete_marker_never_reaches_the_table_even_when_the_table_has_that_column(
    spark: SparkSession,
) -> None:
    schema = StructType([*SCHEMA.fields, StructField("gone", BooleanType())])
    df = spark.createDataFrame([(1, "a", True)], schema)
    fitted = aligned(df, schema, Merge(keys=("id",), delete_column="gone"))
    assert fitted is not df and [tuple(r) for r in fitted.collect()] == [(1, "a", None)]
