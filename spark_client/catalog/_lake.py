"""Where a lake lives (a local directory or an object store) and the one place its paths are mapped between Spark
and the driver's format libraries.

Spark reads and writes through the cluster's own Hadoop file system connectors, the format libraries on the driver
(deltalake, pyiceberg, pypaimon) and pyarrow through their own clients, and the two name S3 differently:

| root given as | the driver (commits, listings, vacuum, non-Spark reads) | Spark (data files, reads) |
|---|---|---|
| `/data/lake` or `file:///data/lake` | `/data/lake` | `/data/lake` |
| `s3://bucket/lake` (or `s3a://`, `s3n://`) | `s3://bucket/lake` | `s3a://bucket/lake` (hadoop-aws) |
| `gs://bucket/lake` (or `gcs://`) | `gs://bucket/lake` | `gs://bucket/lake` (the GCS connector) |
| `abfss://container@account.dfs.core.windows.net/lake` | as given | as given (hadoop-azure) |

Every path a catalog stores, lists or compares is the driver's form; `LakeRoot.spark_path` turns one into what
Spark is given, `LakeRoot.driver_path` turns what Spark reports (`_metadata.file_path`) back.

`Files` lists, reads, moves and deletes files under a root through one pyarrow `FileSystem`: the local one, or
for an object store the format library's own (deltalake's `DeltaStorageHandler`, pyiceberg's and pypaimon's
`PyArrowFileIO`), so that the driver's file operations use the same credentials and endpoint as its commits.
"""

from __future__ import annotations

import os
import posixpath
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

# a scheme as given → the driver's scheme
DRIVER_SCHEMES: Mapping[str, str] = {
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "gs": "gs",
    "gcs": "gs",
    "abfss": "abfss",
    "abfs": "abfs",
}
# the driver's scheme → the scheme Spark's Hadoop connector reads and writes
SPARK_SCHEMES: Mapping[str, str] = {"s3": "s3a", "gs": "gs", "abfss": "abfss", "abfs": "abfs"}
OBJECT_STORES = frozenset(SPARK_SCHEMES)
_GLOB = re.compile(r"[*?\[\]{}\\]")


@dataclass(frozen=True)
class LakeRoot:
    """A lake root as the driver names it: an absolute local path, or `scheme://bucket/prefix` (no trailing `/`).

    Attributes:
        uri: the root.
        scheme: the driver's scheme ("s3", "gs", "abfss", "abfs"), "" for a local directory.
    """

    uri: str
    scheme: str

    @classmethod
    def parse(cls, root: str | os.PathLike[str], *, what: str, schemes: frozenset[str] = OBJECT_STORES) -> LakeRoot:
        """The root `root` names, refusing what Spark could not read back and schemes the format cannot use.

        Spark expands `* ? [ ] { } \\` in the file names it is given as patterns, so a table under a directory
        named, say, `lake[prod]` would write fine and then read as "path does not exist" (or, with globbing
        switched off, some files twice). Refused up front, before anything is written.

        Raises:
            ValueError: a scheme outside `schemes` (or no bucket), or a path with one of those characters.
        """
        given = os.fspath(root)
        if found := sorted(set(_GLOB.findall(given))):
            raise ValueError(
                f"{what} {given!r} contains {' '.join(found)}: Spark reads table files by name and expands these as "
                "patterns, so the tables could not be read back; choose a directory without them"
            )
        if "://" not in given:
            return cls(os.path.abspath(given), "")
        parsed = urlparse(given)
        if parsed.scheme == "file":
            return cls(os.path.abspath(unquote(parsed.path)), "")
        scheme = DRIVER_SCHEMES.get(parsed.scheme.lower())
        if scheme is None or scheme not in schemes:
            accepted = sorted(s for s, driver in DRIVER_SCHEMES.items() if driver in schemes)
            raise ValueError(
                f"{what} must be a local directory or an object-store URI "
                f"({', '.join(f'{s}://' for s in accepted)}), got {given!r}"
            )
        if not parsed.netloc:
            raise ValueError(f"{what} {given!r} names no bucket or container")
        path = posixpath.normpath("/" + parsed.path.strip("/")) if parsed.path.strip("/") else ""
        return cls(f"{scheme}://{parsed.netloc}{path.rstrip('/')}", scheme)

    @property
    def is_local(self) -> bool:
        """A directory of the local file system (or one mounted alike on every machine)."""
        return not self.scheme

    def join(self, *parts: str) -> str:
        """The path of `parts` under the root (the driver's form)."""
        if self.is_local:
            return os.path.join(self.uri, *parts)
        return "/".join([self.uri, *(p.strip("/") for p in parts)])

    def spark_path(self, path: str) -> str:
        """`path` (the driver's form) as Spark is given it: `s3://` → `s3a://`; others unchanged."""
        if self.is_local:
            return path
        scheme, sep, rest = path.partition("://")
        if not sep:
            return path
        return f"{SPARK_SCHEMES.get(DRIVER_SCHEMES.get(scheme.lower(), scheme), scheme)}://{rest}"

    def driver_path(self, uri: str) -> str:
        """A path as Spark reports it (`_metadata.file_path`: a percent-encoded URI) or a format library lists it
        (`file:` URIs, `s3a://`, a trailing `/`), in the driver's form that catalogs compare paths in."""
        parsed = urlparse(uri)
        if parsed.scheme in ("", "file"):
            return os.path.normpath(unquote(parsed.path))
        scheme = DRIVER_SCHEMES.get(parsed.scheme.lower(), parsed.scheme)
        return f"{scheme}://{parsed.netloc}{unquote(parsed.path).rstrip('/')}"

    def normalize(self, path: str) -> str:
        """A path the driver's libraries produced, in the form catalogs compare paths in."""
        return os.path.normpath(path) if self.is_local and "://" not in path else self.driver_path(path)


LOCAL = LakeRoot("", "")  # the local file system, for paths alone (no root)


@dataclass(frozen=True)
class FileStat:
    """One file found under a directory: its size in bytes and modification time (seconds since the epoch)."""

    size: int
    mtime: float


class Files:
    """Files under a lake root through one pyarrow FileSystem.

    Args:
        filesystem: the local file system when None; for an object store, the format library's own.
        fs_path: the file system's name of a path in the driver's form (identity when None).
    """

    def __init__(self, filesystem: pafs.FileSystem | None = None, fs_path: Callable[[str], str] | None = None) -> None:
        import pyarrow.fs as pafs

        self.filesystem = filesystem if filesystem is not None else pafs.LocalFileSystem()
        self.local = filesystem is None
        self._fs_path = fs_path or (lambda path: path)

    def fs_path(self, path: str) -> str:
        """`path` (the driver's form) as the file system names it."""
        return self._fs_path(path)

    def list_files(self, directory: str, *, recursive: bool = True) -> dict[str, FileStat]:
        """The files under `directory` (every level when `recursive`) by path in the driver's form, in name order;
        empty when the directory does not exist. An object store's "directories" are not files."""
        import pyarrow.fs as pafs

        base = directory.rstrip("/") if len(directory) > 1 else directory
        fs_base = self.fs_path(base).rstrip("/")
        selector = pafs.FileSelector(fs_base, recursive=recursive, allow_not_found=True)
        found: dict[str, FileStat] = {}
        for info in self.filesystem.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            relative = info.path[len(fs_base) :].lstrip("/") if info.path.startswith(fs_base) else info.path
            mtime = info.mtime.timestamp() if info.mtime is not None else time.time()  # unknown age: young
            found[f"{base}/{relative}"] = FileStat(int(info.size or 0), mtime)
        return dict(sorted(found.items()))

    def read_bytes(self, path: str) -> bytes | None:
        """The content of the file at `path`, or None when there is none."""
        try:
            with self.filesystem.open_input_stream(self.fs_path(path)) as stream:
                data: bytes = stream.read()
                return data
        except FileNotFoundError:
            return None

    def delete(self, path: str) -> None:
        """Delete the file at `path`."""
        self.filesystem.delete_file(self.fs_path(path))

    def move(self, source: str, target: str) -> None:
        """Move a file (a rename locally, a copy and a delete on an object store); the target's directory is
        created when the file system has directories."""
        if self.local:
            os.makedirs(os.path.dirname(target), exist_ok=True)
        self.filesystem.move(self.fs_path(source), self.fs_path(target))

    def remove_empty_directory(self, path: str) -> None:
        """Remove the empty directory `path` of a local file system (an object store has no directories)."""
        if self.local:
            os.rmdir(path)

    def footer(self, path: str) -> pq.FileMetaData:
        """The parquet footer of the file at `path` (the data itself is not read)."""
        import pyarrow.parquet as pq

        if self.local:
            return pq.read_metadata(path)
        return pq.read_metadata(self.fs_path(path), filesystem=self.filesystem)

    def dataset_paths(self, paths: list[str]) -> tuple[list[str], pafs.FileSystem | None]:
        """`paths` and the file system for `pyarrow.dataset.dataset(paths, filesystem=...)`."""
        if self.local:
            return paths, None
        return [self.fs_path(p) for p in paths], self.filesystem
